"""A server with a warm pool: pooled emulators are indistinguishable from fresh ones."""

from __future__ import annotations

import json
import urllib.request
from typing import ClassVar

import ale_py
import gymnasium
import pytest

from atari import AtariEnv, atari_factory, normalize_config
from openenv_ws.client import EnvClient, HTTPEnvClient
from openenv_ws.errors import RemoteEnvError
from openenv_ws.gym import RemoteEnv
from openenv_ws.providers import LocalServerProvider
from openenv_ws.server import ServerThread, create_app
from openenv_ws.server.runtime.pool import WarmPool, normalized_key
from openenv_ws.testing import FakeEnvironment

from ...adapters.gym.rollout import assert_same_rollouts, play
from ...conftest import UNIT
from ..reliability.conftest import wait_until

gymnasium.register_envs(ale_py)


def test_pooled_atari_sessions_match_gymnasium_over_the_wire() -> None:
    """A pooled emulator behaves exactly like a fresh one: same frames as ale-py's env."""
    pool = WarmPool(
        atari_factory, size=1, key=normalized_key(normalize_config), warm=[{"game": "breakout"}]
    )
    app = create_app(atari_factory, pool=pool)
    with ServerThread(app) as server:
        assert pool.wait_ready(timeout=30 * UNIT)
        gym_env = gymnasium.make("ALE/Breakout-v5", repeat_action_probability=0.25)
        remote = RemoteEnv(server.url, config={"game": "breakout"})
        assert pool.stats()["hits"] == 1  # the session got the pooled emulator
        want, got = play(gym_env, 8, 300), play(remote, 8, 300)
        assert_same_rollouts(got, want)
        assert any(item[1] for item in want[1:] if len(item) > 1)  # rewards were compared
        remote.close()
        with urllib.request.urlopen(f"{server.http_url}/health", timeout=5 * UNIT) as reply:
            health = json.loads(reply.read())
        assert health["pool"]["hits"] == 1 and health["pool"]["size"] == 1
        # A refused config still gets its precise error through the pool.
        with pytest.raises(RemoteEnvError) as info:
            AtariEnv(server.url, game="breakout", mode=99)
        assert info.value.code == "bad_config" and "mode" in info.value.message
    gym_env.close()
    assert pool.ready() == 0  # closed with the app


def test_one_session_per_episode_reuses_one_emulator() -> None:
    """Sessions that end give their emulators back: the next one loads no ROM and
    plays exactly like a fresh emulator (gymnasium's)."""
    pool = WarmPool(atari_factory, size=1, key=normalized_key(normalize_config), refill_delay=3600)
    app = create_app(atari_factory, pool=pool)
    gym_env = gymnasium.make("ALE/Breakout-v5", repeat_action_probability=0.25)
    want = play(gym_env, 5, 250)
    with ServerThread(app) as server:
        for episode in range(3):
            remote = RemoteEnv(server.url, config={"game": "breakout"})
            assert_same_rollouts(play(remote, 5, 250), want)
            remote.close()
            wait_until(
                lambda n=episode: pool.stats()["recycled"] == n + 1, 10 * UNIT, what="the give-back"
            )
        stats = pool.stats()
        assert (stats["misses"], stats["hits"], stats["built"]) == (1, 2, 0)  # one ROM load
        with urllib.request.urlopen(f"{server.http_url}/health", timeout=5 * UNIT) as reply:
            assert json.loads(reply.read())["pool"]["recycled"] == 3
    gym_env.close()


class Tracked(FakeEnvironment):
    closed: ClassVar[list[Tracked]] = []

    def close(self) -> None:
        Tracked.closed.append(self)


@pytest.mark.parametrize("transport", ["ws", "http"])
def test_an_environment_that_failed_is_closed_not_recycled(transport: str) -> None:
    Tracked.closed.clear()
    pool = WarmPool(Tracked, size=2, refill_delay=3600)
    with ServerThread(create_app(Tracked, pool=pool)) as server:
        client = EnvClient if transport == "ws" else HTTPEnvClient
        url = server.url if transport == "ws" else server.http_url
        env = client(url, config={"fail_at_step": 2})
        env.reset()
        env.step(0)
        with pytest.raises(RemoteEnvError) as info:
            env.step(0)
        assert info.value.code == "internal"
        env.close()
        wait_until(lambda: len(Tracked.closed) == 1, 10 * UNIT, what="the close")
        healthy = client(url, config={"fail_at_step": 2})
        healthy.reset()
        healthy.step(0)
        healthy.close()
        wait_until(lambda: pool.stats()["recycled"] == 1, 10 * UNIT, what="the give-back")
        assert len(Tracked.closed) == 1 and pool.ready({"fail_at_step": 2}) == 1


@pytest.mark.parametrize("flags", [[], ["--no-pool-recycle"]], ids=["default", "no-recycle"])
def test_serve_recycles_unless_told_not_to(flags: list[str]) -> None:
    args = ["--no-web", "--pool-size", "1", "--pool-warm", '{"obs_type": "ram"}', *flags]
    with LocalServerProvider(args=args) as server:
        wait_until(
            lambda: (server.health() or {})["pool"]["ready"] == 1, 10 * UNIT, what="the warm build"
        )
        with EnvClient(server.url, config={"obs_type": "ram"}) as env:
            env.reset()
            env.step(0)
        wait_until(
            lambda: (server.health() or {})["sessions"] == 0, 10 * UNIT, what="the session's end"
        )
        pool = (server.health() or {})["pool"]
        assert pool["hits"] == 1
        if flags:
            assert pool["recycled"] == 0
        else:  # the warm build, then a recycle (or a refill, 1 s after the take, came first)
            assert pool["built"] + pool["recycled"] == 2, pool
