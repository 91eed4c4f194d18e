"""A sync client whose program is busy elsewhere keeps its session (a real server subprocess).

Between two calls (a training update, an evaluation) the client's heartbeat
thread answers the server's pings, so the connection stays up however long
the pause; only the server's idle timeout ends the session, and the error
names the option that sets it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from openenv_ws import SessionClosed
from openenv_ws.client import EnvClient
from openenv_ws.client._idle import TICK
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import LocalServerProvider

from ..conftest import UNIT
from ..server.reliability.conftest import wait_until


def server(*args: str) -> LocalServerProvider:
    return LocalServerProvider(args=["--env", "fake", *args]).start()


@pytest.fixture
def quick_heartbeat() -> Iterator[LocalServerProvider]:
    """Pings every half unit, dropped after one unanswered unit, no session kept for resuming."""
    timeout = max(1.0 * UNIT, 4 * TICK)
    with server(
        "--ping-interval", str(0.5 * UNIT), "--ping-timeout", str(timeout), "--grace", "0"
    ) as provider:
        yield provider


def busy_elsewhere(seconds: float) -> None:
    """The user's program works without calling the client (a PPO update)."""
    time.sleep(seconds)


def test_a_client_idle_through_many_heartbeats_keeps_its_session(
    quick_heartbeat: LocalServerProvider,
) -> None:
    with EnvClient(quick_heartbeat.url) as env:
        env.reset(seed=0)
        assert env.step(1).info == {"step": 1}
        busy_elsewhere(6 * UNIT)  # four heartbeat timeouts and more
        assert env.step(2).info == {"step": 2}
        busy_elsewhere(3 * UNIT)
        assert env.state()["step_count"] == 2
        health = quick_heartbeat.health()
        assert health is not None and health["sessions"] == 1 and health["parked"] == 0


def test_a_long_call_reads_its_own_reply_and_the_heartbeat_thread_stays_out(
    quick_heartbeat: LocalServerProvider,
) -> None:
    with EnvClient(quick_heartbeat.url, config={"step_sleep": 2 * UNIT}) as env:
        env.reset(seed=0)
        busy_elsewhere(2 * UNIT)
        for action in (1, 2):  # each step outlasts a tick of the heartbeat thread
            assert env.step(action).reward == float(action)
        assert env.state()["step_count"] == 2


def test_several_idle_clients_in_one_process_keep_their_sessions(
    quick_heartbeat: LocalServerProvider,
) -> None:
    envs = [EnvClient(quick_heartbeat.url) for _ in range(3)]
    try:
        for env in envs:
            env.reset(seed=0)
        envs[0].step(0)
        busy_elsewhere(4 * UNIT)
        for i, env in enumerate(envs):
            assert env.step(1).info == {"step": 2 if i == 0 else 1}
    finally:
        for env in envs:
            env.close()


def test_an_idle_vector_client_keeps_its_sessions_and_replies_that_came_meanwhile(
    quick_heartbeat: LocalServerProvider,
) -> None:
    with VectorEnvClient(quick_heartbeat.url, 2) as envs:
        envs.reset(seed=0)
        busy_elsewhere(4 * UNIT)
        _, rewards, *_ = envs.step(np.ones(2, np.int64))
        assert rewards.tolist() == [1.0, 1.0]
        envs.send(np.zeros(2, np.int64))  # the replies arrive while nobody reads
        busy_elsewhere(4 * UNIT)
        _, _, _, _, infos = envs.recv(min_envs=2)
        assert sorted(infos["env_id"].tolist()) == [0, 1] and infos["step"].tolist() == [2, 2]
        assert envs.step(np.ones(2, np.int64))[4]["step"].tolist() == [3, 3]


def test_only_the_idle_timeout_ends_an_idle_session_and_it_says_which_option() -> None:
    idle = 2.0 * UNIT
    with server(
        "--ping-interval", str(0.5 * UNIT), "--idle-timeout", str(idle), "--grace", "0"
    ) as provider:
        env = EnvClient(provider.url)
        env.reset(seed=0)

        def freed() -> bool:
            health = provider.health()
            return health is not None and health["sessions"] == 0

        wait_until(freed, idle + 10 * UNIT, what="the idle session closed")
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        assert info.value.close_code == 1001
        assert "idle timeout" in str(info.value) and "--idle-timeout" in str(info.value)
        env.close()


@pytest.mark.slow
def test_five_idle_minutes_with_the_default_settings_keep_the_session() -> None:
    """Past the default heartbeat (20 + 20 s) and grace (30 s) many times over, well
    within the default idle timeout (600 s); no resume allowed, so no drop went unseen."""
    with server() as provider, EnvClient(provider.url, resume=False) as env:
        env.reset(seed=0)
        busy_elsewhere(300)
        assert env.step(3).info == {"step": 1}
