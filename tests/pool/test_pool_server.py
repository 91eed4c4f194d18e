"""A server with a warm pool: pooled emulators are indistinguishable from fresh ones."""

from __future__ import annotations

import json
import urllib.request

import ale_py
import gymnasium
import pytest

from atari import AtariEnv, atari_factory, normalize_config
from openenv_ws.errors import RemoteEnvError
from openenv_ws.gym import RemoteEnv
from openenv_ws.server import ServerThread, create_app
from openenv_ws.server.pool import WarmPool, normalized_key

from ..conftest import UNIT
from ..gym.rollout import assert_same_rollouts, play

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
