"""Where servers come from: steps/s through a Docker-published port and through Ray actors."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from ..measure import inprocess_steps, latency_row
from ..servers import our_server
from ..suite import Column, Context, Section, has_attr, scenario
from .latency import KEY_COLUMNS, PERCENTILE_COLUMNS, sync_steps

__all__ = ["DEFAULT_IMAGE"]

#: The image .ci/lib/build-image.sh builds from the repository's Dockerfile.
DEFAULT_IMAGE = "openenv-ws/atari:ci"

COLUMNS = [
    *KEY_COLUMNS,
    *PERCENTILE_COLUMNS,
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("vs_local", "vs local server", ".2f"),
    Column("vs_inprocess", "vs in-process", ".2f"),
    Column("note", "note"),
]


@scenario(
    "docker",
    "Docker-published server",
    requires=has_attr("openenv_ws.providers", "DockerProvider", "the Docker provider"),
)
def run_docker(ctx: Context) -> Section:
    """One session through the Atari image's published port, next to the local server."""
    placement = ctx.placements()[0]
    image = os.environ.get("OPENENV_WS_BENCH_IMAGE", DEFAULT_IMAGE)
    provider = importlib.import_module("openenv_ws.providers").DockerProvider
    run_options = {} if placement.server is None else {"cpuset_cpus": _cpus(placement.server)}

    @contextlib.contextmanager
    def server() -> Iterator[str]:
        with provider(image, pull=False, run_options=run_options) as container:
            yield container.url

    section = _next_to_local(ctx, "docker", "Docker-published server", "Docker port", server)
    section.notes.append(
        f"The image ({image}; set OPENENV_WS_BENCH_IMAGE for another) is built by "
        ".ci/lib/build-image.sh; its port is published on 127.0.0.1 and the container is "
        "pinned to the server cores of the placement."
    )
    return section


@scenario(
    "ray",
    "Ray actors",
    requires=has_attr("openenv_ws.providers", "RayProvider", "the Ray provider"),
)
def run_ray(ctx: Context) -> Section:
    """One session on a Ray env-server actor (a local Ray instance), next to the local server."""
    provider = importlib.import_module("openenv_ws.providers").RayProvider

    @contextlib.contextmanager
    def server() -> Iterator[str]:
        temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        init = {
            "address": "local",
            "num_cpus": 2,
            "include_dashboard": False,
            "log_to_driver": False,
            "_temp_dir": temp,
        }
        try:
            with provider(1, host="127.0.0.1", init_options=init) as actors:
                yield actors.urls[0]
        finally:
            shutil.rmtree(temp, ignore_errors=True)

    section = _next_to_local(ctx, "ray", "Ray actors", "Ray actor", server)
    section.notes.append(
        "One env-server actor on a local Ray instance (2 CPUs, 127.0.0.1); the client "
        "connects to the actor's own WebSocket URL."
    )
    return section


def _next_to_local(
    ctx: Context,
    name: str,
    title: str,
    where: str,
    server: Callable[[], contextlib.AbstractContextManager[str]],
) -> Section:
    """In-process, the local server and the provider's server on the same workloads."""
    section = Section(name, title, COLUMNS)
    placement = ctx.placements()[0]
    works = list(ctx.workloads())
    ctx.progress.start(section.title, 3 * len(works))
    with our_server(placement) as local, placement.client_side():
        for work in works:
            base = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
            ctx.progress.phase(f"in-process {work.label()}")
            reference = latency_row(inprocess_steps(work))
            ctx.progress.phase(f"local server {work.label()}")
            ours = latency_row(sync_steps(local.url, work))
            section.add(**base, path="in-process", **reference, vs_inprocess=1.0)
            section.add(
                **base,
                path="openenv-ws sync, local server",
                **ours,
                vs_local=1.0,
                vs_inprocess=ours["steps_per_s"] / reference["steps_per_s"],
            )
            ctx.progress.phase(f"{where} {work.label()}")
            row = {**base, "path": f"openenv-ws sync, {where}"}
            try:
                with server() as url:
                    stats = latency_row(sync_steps(url, work))
            except Exception as exc:  # noqa: BLE001 - no engine, image or cluster: the row says why
                section.add(**row, note=f"could not run: {exc}".splitlines()[0])
                continue
            section.add(
                **row,
                **stats,
                vs_local=stats["steps_per_s"] / ours["steps_per_s"],
                vs_inprocess=stats["steps_per_s"] / reference["steps_per_s"],
            )
    return section


def _cpus(cores: frozenset[int]) -> str:
    return ",".join(map(str, sorted(cores)))
