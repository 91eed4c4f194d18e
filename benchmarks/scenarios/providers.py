"""Where servers come from: steps/s through a Docker-published port and through Ray actors."""

from __future__ import annotations

from ..suite import Context, Section, has_attr, scenario

__all__: list[str] = []


def _not_wired(name: str) -> Section:
    raise NotImplementedError(
        f"the {name} provider is in this build but the benchmark does not drive it yet"
    )


@scenario(
    "docker",
    "Docker-published server",
    requires=has_attr("openenv_ws.providers", "DockerProvider", "the Docker provider"),
)
def run_docker(ctx: Context) -> Section:
    """One session through the Atari image's published port, next to the local server."""
    return _not_wired("Docker")


@scenario(
    "ray",
    "Ray actors",
    requires=has_attr("openenv_ws.providers", "RayProvider", "the Ray provider"),
)
def run_ray(ctx: Context) -> Section:
    """Sessions spread over Ray env-server actors, next to the local server."""
    return _not_wired("Ray")
