"""DockerProvider and from_docker_image against a real engine and the image of this checkout."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from atari import AsyncAtariEnv, AtariEnv, AtariEnvironment
from openenv_ws import ServerUnavailable
from openenv_ws.client import EnvClient
from openenv_ws.providers import DockerProvider
from openenv_ws.providers.docker import DEFAULT_LABEL

from ..conftest import UNIT

# A container that runs but never serves: python as PID 1 ignores SIGTERM too.
SILENT = ["python", "-c", "import time; time.sleep(600)"]


def ours(client: Any) -> list[Any]:
    """The containers this test process's providers started, running or not."""
    mine = f"{DEFAULT_LABEL}={os.getpid()}"
    return list(client.containers.list(all=True, filters={"label": mine}))


def wait_none_left(client: Any, timeout: float = 30 * UNIT) -> list[Any]:
    deadline = time.monotonic() + timeout
    while (left := ours(client)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture(autouse=True)
def nothing_left_running(docker_client: Any) -> Iterator[None]:
    assert ours(docker_client) == []
    yield
    assert wait_none_left(docker_client) == [], "a provider left its container behind"


def test_from_docker_image_plays_an_episode_like_in_process(atari_image: str) -> None:
    local = AtariEnvironment({"game": "pong", "max_episode_steps": 40})
    with AtariEnv.from_docker_image(atari_image, game="pong", max_episode_steps=40) as env:
        assert env.url.startswith("ws://127.0.0.1:")
        result = env.reset(seed=7)
        np.testing.assert_array_equal(result.observation.screen, local.reset(seed=7).obs)
        steps = 0
        while not result.done:
            action = steps % 6
            result, want = env.step(action), local.step(action)
            np.testing.assert_array_equal(result.observation.screen, want.obs)
            assert (result.reward, result.terminated, result.truncated) == (
                want.reward,
                want.terminated,
                want.truncated,
            )
            steps += 1
        assert steps == 40 and result.truncated
        assert env.state().step_count == 40


def test_the_port_is_published_on_loopback_and_the_server_drains_on_stop(
    atari_image: str, docker_client: Any
) -> None:
    with DockerProvider(atari_image) as server:
        (container,) = ours(docker_client)
        bindings = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"]
        assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}
        assert server.url == f"ws://127.0.0.1:{server.host_port}/ws"
        health = server.health()
        assert health is not None and health["status"] == "ok"
        # One container hosts many sessions, each its own environment.
        clients = [EnvClient(server.url, config={"game": "pong"}) for _ in range(3)]
        try:
            for seed, client in enumerate(clients):
                client.reset(seed=seed)
            assert (server.health() or {})["sessions"] == 3
        finally:
            for client in clients:
                client.close()
    # Its STOPSIGNAL (SIGTERM) let the server drain and exit on its own, not by SIGKILL.
    assert server.exit_code == 0
    with pytest.raises(ServerUnavailable, match="stopped"):
        server.start()


async def test_async_from_docker_image(atari_image: str, docker_client: Any) -> None:
    env = await AsyncAtariEnv.from_docker_image(atari_image, game="breakout", obs_type="ram")
    async with env:
        assert len(ours(docker_client)) == 1
        first = await env.reset(seed=1)
        assert first.observation.screen.shape == (128,)
        result = await env.step(1)
        assert result.observation.frame_number > first.observation.frame_number
    assert ours(docker_client) == []


def test_a_server_that_exits_at_start_is_removed_and_says_why(atari_image: str) -> None:
    command = ["openenv-ws", "serve", "--host", "0.0.0.0", "--port", "8000", "--env", "nope:x"]
    with pytest.raises(ServerUnavailable, match="exited with code 1") as info:
        DockerProvider(atari_image, command=command).start()
    assert "cannot be loaded" in str(info.value)  # the tail of the server's output


def test_a_server_that_never_answers_is_removed_after_the_timeout(atari_image: str) -> None:
    provider = DockerProvider(atari_image, command=SILENT, startup_timeout=2 * UNIT, stop_timeout=1)
    with pytest.raises(ServerUnavailable, match="did not answer GET /health"):
        provider.start()
    assert provider.container_id is None


def test_a_caller_raising_inside_with_removes_the_container(
    atari_image: str, docker_client: Any
) -> None:
    with pytest.raises(ZeroDivisionError), DockerProvider(atari_image):
        assert len(ours(docker_client)) == 1
        _ = 1 / 0


def test_a_refused_session_removes_the_container(atari_image: str) -> None:
    with pytest.raises(Exception, match="no_such_game"):
        AtariEnv.from_docker_image(atari_image, game="no_such_game")


def test_stop_from_another_thread_ends_a_start_in_progress(
    atari_image: str, docker_client: Any
) -> None:
    provider = DockerProvider(atari_image, command=SILENT, stop_timeout=1)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            provider.start()
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    deadline = time.monotonic() + 30 * UNIT
    while not ours(docker_client) and time.monotonic() < deadline:
        time.sleep(0.05)
    provider.stop()
    thread.join(30 * UNIT)
    assert len(errors) == 1 and isinstance(errors[0], ServerUnavailable)
    assert "stopped while starting" in str(errors[0])


async def test_cancelling_an_async_start_removes_the_container(
    atari_image: str, docker_client: Any
) -> None:
    opening = asyncio.ensure_future(
        AsyncAtariEnv.from_docker_image(
            atari_image, provider_options={"command": SILENT, "stop_timeout": 1}
        )
    )
    deadline = time.monotonic() + 30 * UNIT
    while not ours(docker_client) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening


def test_a_missing_image_is_a_clear_error(docker_client: Any) -> None:
    with pytest.raises(ServerUnavailable, match="has no image 'openenv-ws/no-such:image'"):
        DockerProvider("openenv-ws/no-such:image", pull=False).start()


def test_no_engine_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(ServerUnavailable, match="no Docker engine answers"):
        DockerProvider("any").start()


def test_remove_orphans_cleans_up_after_a_killed_owner(
    atari_image: str, docker_client: Any
) -> None:
    DockerProvider.remove_orphans()  # what killed runs before this one left behind
    # The owner starts a container that never serves and is killed while it waits.
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from openenv_ws.providers import DockerProvider; "
            "DockerProvider(sys.argv[1], command=sys.argv[2:], startup_timeout=600).start()",
            atari_image,
            *SILENT,
        ],
        env={**os.environ},
    )
    try:
        deadline = time.monotonic() + 60 * UNIT
        label = {"label": f"{DEFAULT_LABEL}={owner.pid}"}
        while not docker_client.containers.list(all=True, filters=label):
            assert time.monotonic() < deadline, "the owner started no container"
            time.sleep(0.1)
        mine = DockerProvider(atari_image).start()  # a live owner's container stays
        try:
            assert DockerProvider.remove_orphans() == []  # its owner still runs
            owner.kill()
            owner.wait()
            (orphan,) = docker_client.containers.list(all=True, filters=label)
            assert DockerProvider.remove_orphans() == [orphan.id]
            assert docker_client.containers.list(all=True, filters=label) == []
            assert mine.health() is not None
        finally:
            mine.stop()
    finally:
        owner.kill()
        owner.wait()
