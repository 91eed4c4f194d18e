"""RayProvider on a real local Ray instance (127.0.0.1, 2 CPUs): placement, sessions, failures."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from atari import AtariEnv, AtariEnvironment
from openenv_ws import ServerUnavailable, SessionClosed
from openenv_ws.client import EnvClient
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import RayProvider
from openenv_ws.testing import fake_factory

from ..conftest import UNIT
from ._procs import wait_dead


def free_cpus(ray: Any, want: float = 2.0, timeout: float = 30 * UNIT) -> float:
    """The CPUs no actor holds, once they are `want` (or what they are after `timeout`)."""
    deadline = time.monotonic() + timeout
    while (
        free := ray.available_resources().get("CPU", 0.0)
    ) < want and time.monotonic() < deadline:
        time.sleep(0.1)
    return float(free)


def sessions(provider: RayProvider) -> list[int]:
    return [h["sessions"] if h else -1 for h in provider.health()]


def test_one_server_per_cpu_each_hosting_many_sessions(local_ray: Any) -> None:
    import os

    with RayProvider(host="127.0.0.1") as provider:
        assert len(provider.urls) == 2 and len(set(provider.urls)) == 2
        pids = {server.pid for server in provider.servers}
        assert len(pids) == 2 and os.getpid() not in pids  # each in its own actor process
        assert {h["pid"] for h in provider.health() if h} == pids
        assert free_cpus(local_ray, want=0.0) == 0.0  # each actor holds its CPU
        local = AtariEnvironment({"game": "pong"})
        envs = [AtariEnv(url, game="pong") for url in provider.urls * 2]
        try:
            first = envs[0].reset(seed=5)
            np.testing.assert_array_equal(first.observation.screen, local.reset(seed=5).obs)
            for t in range(20):
                result = envs[0].step(t % 6)
                np.testing.assert_array_equal(result.observation.screen, local.step(t % 6).obs)
            for env in envs[1:]:
                env.reset(seed=0)
            assert sessions(provider) == [2, 2]
        finally:
            for env in envs:
                env.close()
        urls = provider.urls
    assert free_cpus(local_ray) == 2.0
    with pytest.raises(ServerUnavailable, match="not started"):
        _ = provider.urls
    for url in urls:
        with pytest.raises(ServerUnavailable):
            EnvClient(url, open_timeout=5 * UNIT)


def test_a_vector_client_spreads_its_sessions_over_the_actors(local_ray: Any) -> None:
    with RayProvider(host="127.0.0.1") as provider:
        config = {"game": "breakout", "obs_type": "grayscale"}
        with VectorEnvClient(provider.urls, 4, config=config) as envs:
            obs, _ = envs.reset(seed=0)
            assert obs.shape == (4, 210, 160)
            obs, rewards, terminated, truncated, _ = envs.step(np.ones(4, dtype=np.int64))
            assert obs.shape == (4, 210, 160) and rewards.shape == (4,)
            assert not terminated.any() and not truncated.any()
            assert sessions(provider) == [2, 2]


def test_a_killed_actor_fails_its_sessions_only(local_ray: Any) -> None:
    with RayProvider(host="127.0.0.1", env=fake_factory) as provider:
        doomed, spared = provider.servers
        envs = [EnvClient(url, timeout=30 * UNIT) for url in provider.urls * 2]
        try:
            for env in envs:
                env.reset(seed=1)
            local_ray.kill(doomed.actor)
            assert wait_dead(doomed.pid)  # ray.kill returns before the process ends
            for env in envs:
                if env.url == doomed.url:
                    with pytest.raises(SessionClosed, match=doomed.url.replace(".", r"\.")):
                        env.step(0)
                else:
                    assert env.step(0).info["step"] == 1
            alive = {status.server.url: status for status in provider.status()}
            assert alive[spared.url].alive and alive[spared.url].reason is None
            assert not alive[doomed.url].alive
            assert "ray.kill" in (alive[doomed.url].reason or "")
        finally:
            for env in envs:
                env.close()
    assert free_cpus(local_ray) == 2.0


def test_an_actor_that_cannot_start_is_a_clear_error(local_ray: Any) -> None:
    with pytest.raises(ServerUnavailable, match="failed to start") as info:
        RayProvider(1, host="127.0.0.1", env="no_such_module:factory").start()
    assert "no_such_module" in str(info.value)
    assert free_cpus(local_ray) == 2.0


def test_more_servers_than_cpus_time_out_clearly(local_ray: Any) -> None:
    provider = RayProvider(3, host="127.0.0.1", env="fake", startup_timeout=3 * UNIT)
    with pytest.raises(ServerUnavailable, match=r"did not all start .* the cluster has 2\.0"):
        provider.start()
    assert free_cpus(local_ray) == 2.0
