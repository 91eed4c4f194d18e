"""Real engines for the provider tests: a Docker engine with the Atari image of this checkout.

The engine is whatever ``DOCKER_HOST`` names, else the private engine of
``.ci/lib/docker-engine.sh`` if it runs (``.ci/run`` starts it in CI). Without
one the Docker tests skip, saying how to start it (in CI a skip fails).

The image is built from this checkout by ``.ci/lib/build-image.sh``, tagged
with a digest of the files that go into it, so it is built once per change of
the sources and always holds the code under test. ``OPENENV_WS_TEST_IMAGE``
names an existing image to use instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import machine_lock
from ._procs import descendants, wait_dead

ROOT = Path(__file__).resolve().parents[2]
IMAGE_REPO = "openenv-ws/atari"
PRIVATE_ENGINE = "unix:///tmp/openenv-ws-docker/docker.sock"
START_HINT = 'start one with: eval "$(.ci/lib/docker-engine.sh start)" (as root)'
# What build-image.sh copies into the build, plus the files that say how.
IMAGE_INPUTS = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "Dockerfile",
    ".dockerignore",
    "openenv_ws",
    "atari",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts Ray by itself (not through ``local_ray``, which holds the lock for
    its module) runs alone on this machine's Ray: marked ``exclusive("ray")``."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "ray_tmpdir" in fixtures and "local_ray" not in fixtures:
            item.add_marker(pytest.mark.exclusive("ray"))


def _engine() -> tuple[Any, str]:
    """A docker client for a live engine and its address, or skip saying why."""
    try:
        import docker
    except ImportError:
        pytest.skip("the docker package is missing: pip install -e '.[docker]'")
    chosen = os.environ.get("DOCKER_HOST")
    # A chosen engine is the only one tried; else the usual socket, then the private engine.
    for host in [chosen] if chosen else ["unix:///var/run/docker.sock", PRIVATE_ENGINE]:
        if host.startswith("unix://") and not os.path.exists(host[len("unix://") :]):
            continue
        client = docker.from_env() if chosen else docker.DockerClient(base_url=host)
        try:
            client.ping()
            return client, host
        except docker.errors.DockerException:
            client.close()
    tried = chosen or f"unix:///var/run/docker.sock or {PRIVATE_ENGINE}"
    pytest.skip(f"no Docker engine answers at {tried}; {START_HINT}")


def image_digest() -> str:
    digest = hashlib.sha256()
    for name in IMAGE_INPUTS:
        path = ROOT / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            rel = file.relative_to(ROOT).as_posix()
            if (
                not file.is_file()
                or "__pycache__" in rel
                or ".egg-info" in rel
                or rel.endswith(".pyc")
            ):
                continue
            digest.update(rel.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of a live engine; ``DOCKER_HOST`` points at it while the tests run."""
    client, host = _engine()
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    try:
        yield client
    finally:
        if saved is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = saved
        client.close()


@pytest.fixture(scope="session")
def atari_image(docker_client: Any) -> str:
    """The tag of an Atari server image holding this checkout's code."""
    import docker

    chosen = os.environ.get("OPENENV_WS_TEST_IMAGE")
    if chosen:
        try:
            docker_client.images.get(chosen)
        except docker.errors.ImageNotFound:
            pytest.fail(f"OPENENV_WS_TEST_IMAGE={chosen} is not an image of the engine")
        return chosen
    tag = f"{IMAGE_REPO}:test-{image_digest()}"
    # One build at a time: the other test processes wait for it, then find the image.
    with machine_lock("atari-image"):
        try:
            docker_client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            return _build(docker_client, tag)


def _build(docker_client: Any, tag: str) -> str:
    """Build the Atari image `tag` from this checkout; earlier images of the tests are removed."""
    build = subprocess.run(
        [str(ROOT / ".ci" / "lib" / "build-image.sh"), tag],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(f"building {tag} failed:\n{build.stderr[-4000:]}")
    # Images of earlier sources are of no further use; keep the engine's disk flat.
    for image in docker_client.images.list(name=IMAGE_REPO):
        if tag not in image.tags and all(t.startswith(f"{IMAGE_REPO}:test-") for t in image.tags):
            docker_client.images.remove(image.id, force=True)
    return tag


#: Ray on loopback only, no usage reports, no token file in the home folder.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
}


@pytest.fixture(scope="session")
def ray_tmpdir() -> Iterator[str]:
    """Ray's settings for the tests and a short temp folder (its unix sockets live there,
    and their paths must stay under 108 bytes, which pytest's tmp_path may exceed)."""
    pytest.importorskip("ray", reason="the ray package is missing: pip install -e '.[ray]'")
    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    saved = {key: os.environ.get(key) for key in [*RAY_ENV, "RAY_TMPDIR"]}
    os.environ.update(RAY_ENV, RAY_TMPDIR=folder)
    try:
        yield folder
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def local_ray(ray_tmpdir: str) -> Iterator[Any]:
    """A local Ray instance on 127.0.0.1 with 2 CPUs; all its processes end with the module."""
    import ray

    with machine_lock("ray"):  # one Ray instance at a time on this machine's 2 cores
        before = descendants()
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _temp_dir=ray_tmpdir,
            log_to_driver=False,
        )
        try:
            yield ray
        finally:
            started = descendants() - before
            ray.shutdown()
            assert_all_ended(started, "ray.shutdown()")


def assert_all_ended(pids: set[int], what: str) -> None:
    left = [pid for pid in pids if not wait_dead(pid)]
    assert not left, f"processes still running after {what}: {left}"
