"""Snapshot and restore over the wire: a restored episode replays identically, anywhere it may go."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.errors import RemoteEnvError
from openenv_ws.server import ServerThread

# Sticky actions and a random frameskip: both random generators must be restored.
CONFIG = {"game": "breakout", "frameskip": [2, 5], "repeat_action_probability": 0.25}


def play_steps(env: EnvClient[Any], actions: list[int]) -> list[tuple[Any, ...]]:
    out = []
    for a in actions:
        r = env.step(a)
        out.append((r.observation, r.reward, r.terminated, r.truncated, r.info))
        if r.done:
            break
    return out


def assert_same_steps(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a[0], b[0], err_msg=f"step {i}")
        assert a[1:] == b[1:], f"step {i}"


def test_a_restored_episode_replays_identically(atari_server: ServerThread) -> None:
    rng = np.random.default_rng(0)
    with EnvClient(atari_server.url, config=CONFIG) as env:
        env.reset(seed=7)
        play_steps(env, rng.integers(0, 4, 60).tolist())
        snap = env.snapshot()
        here = env.state()
        actions = rng.integers(0, 4, 300).tolist()
        first = play_steps(env, actions)
        assert len({step[4]["lives"] for step in first}) > 1  # the branch lost lives on the way
        for _ in range(2):  # the same snapshot, twice: two identical branches
            restored = env.restore(snap)
            assert restored.reward == 0.0 and not restored.done
            assert env.state()["step_count"] == here["step_count"]
            assert_same_steps(play_steps(env, actions), first)
        env.restore(snap)
        other = play_steps(env, [(a + 1) % 4 for a in actions])  # another branch differs
        assert any(not np.array_equal(a[0], b[0]) for a, b in zip(other, first, strict=False))


def test_a_snapshot_restores_into_another_session_with_the_same_config(
    atari_server: ServerThread,
) -> None:
    actions = np.random.default_rng(1).integers(0, 4, 150).tolist()
    with (
        EnvClient(atari_server.url, config=CONFIG) as a,
        EnvClient(atari_server.url, config=CONFIG) as b,
    ):
        a.reset(seed=3)
        play_steps(a, actions[:40])
        snap = a.snapshot()
        want = play_steps(a, actions)
        b.reset(seed=99)  # a different episode until the restore
        start = b.restore(snap)
        assert start.observation is not None
        assert_same_steps(play_steps(b, actions), want)
    with EnvClient(atari_server.url, config={**CONFIG, "game": "pong"}) as c:
        c.reset(seed=0)
        with pytest.raises(RemoteEnvError) as info:
            c.restore(snap)  # another game: refused, the session goes on
        assert not info.value.fatal
        c.step(0)
