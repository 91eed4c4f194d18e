"""Preprocessed sessions as sessions: spec, snapshots, recycling, and over a real server."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from atari import AtariEnvironment
from openenv_ws.client import EnvClient
from openenv_ws.errors import BadSnapshot
from openenv_ws.server import ServerThread

pytest.importorskip("cv2")

# Everything at once, with sticky actions and a frameskip pair: every generator and buffer counts.
RECIPE = {
    "game": "breakout",
    "obs_type": "grayscale",
    "frameskip": [2, 6],
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
    "maxpool": True,
    "noop_max": 30,
    "episodic_life": True,
    "reward_clipping": True,
    "use_fire_reset": True,
}


def play(env: AtariEnvironment, actions: list[int]) -> list[tuple[Any, ...]]:
    out = []
    for action in actions:
        r = env.step(action)
        out.append((r.obs, r.reward, r.terminated, r.truncated, r.info))
        if r.terminated or r.truncated:
            break
    return out


def assert_same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a[0], b[0], err_msg=f"step {i}")
        assert a[1:] == b[1:], i


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({}, (210, 160, 3)),
        ({"stack_num": 4}, (4, 210, 160, 3)),
        ({"obs_type": "grayscale", "stack_num": 4, "img_height": 84, "img_width": 84}, (4, 84, 84)),
        ({"obs_type": "grayscale", "img_height": 100}, (100, 160)),
        ({"img_width": 80, "maxpool": True}, (210, 80, 3)),
        ({"obs_type": "ram", "stack_num": 3, "noop_max": 4}, (3, 128)),
        ({"reward_clipping": True}, (210, 160, 3)),
    ],
)
def test_observation_shape_follows_the_options(
    config: dict[str, Any], shape: tuple[int, ...]
) -> None:
    env = AtariEnvironment(config)
    assert env.spec.observation.shape == shape
    assert env.reset(seed=0).obs.shape == shape
    assert env.step(0).obs.shape == shape
    out = np.empty(shape, np.uint8)
    assert env.step(0, out=out).obs is out


def test_indexed_frames_only_without_preprocessing() -> None:
    assert AtariEnvironment({}).indexed_frames() is not None
    for config in ({"stack_num": 2}, {"img_height": 84}, {"maxpool": True}, {"noop_max": 3}):
        assert AtariEnvironment(config).indexed_frames() is None, config


def test_observations_skipped_are_still_stacked() -> None:
    a, b = AtariEnvironment(RECIPE), AtariEnvironment(RECIPE)
    np.testing.assert_array_equal(a.reset(seed=2).obs, b.reset(seed=2).obs)
    for t, action in enumerate(np.random.default_rng(0).integers(0, 4, 40).tolist()):
        got = a.step(action, obs=t % 3 == 0)
        want = b.step(action)
        assert got.obs is None or np.array_equal(got.obs, want.obs)
        assert (got.reward, got.terminated, got.info) == (want.reward, want.terminated, want.info)
    np.testing.assert_array_equal(a.step(1).obs, b.step(1).obs)


def test_a_restored_preprocessed_episode_replays_identically() -> None:
    rng = np.random.default_rng(3)
    env = AtariEnvironment(RECIPE)
    env.reset(seed=5)
    play(env, rng.integers(0, 4, 30).tolist())
    before = env.step(1).obs
    snap = env.snapshot()
    actions = rng.integers(0, 4, 300).tolist()
    first = play(env, actions)
    assert len(first) > 20
    for _ in range(2):
        restored = env.restore(snap)
        np.testing.assert_array_equal(restored.obs, before)  # the stack as it was
        assert restored.reward == 0.0
        assert_same(play(env, actions), first)
    other = AtariEnvironment(RECIPE)  # another instance of the same config
    other.reset(seed=99)
    np.testing.assert_array_equal(other.restore(snap).obs, before)
    assert_same(play(other, actions), first)


@pytest.mark.parametrize(
    "config",
    [
        {**RECIPE, "stack_num": 2},
        {**RECIPE, "episodic_life": False},
        {k: v for k, v in RECIPE.items() if k == "game"},
    ],
)
def test_a_snapshot_needs_the_same_preprocessing(config: dict[str, Any]) -> None:
    env = AtariEnvironment(RECIPE)
    env.reset(seed=1)
    env.step(1)
    snap = env.snapshot()
    other = AtariEnvironment(config)
    other.reset(seed=1)
    with pytest.raises(BadSnapshot) as info:
        other.restore(snap)
    assert "same config" in str(info.value)
    other.step(0)  # the refused restore left the session as it was
    plain = AtariEnvironment({"game": "breakout"})
    plain.reset(seed=0)
    with pytest.raises(BadSnapshot):
        env.restore(plain.snapshot())


def test_recycle_starts_the_preprocessing_over() -> None:
    actions = np.random.default_rng(4).integers(0, 4, 60).tolist()
    fresh = AtariEnvironment(RECIPE)
    first = fresh.reset(seed=8).obs
    want = play(fresh, actions)
    used = AtariEnvironment(RECIPE)
    used.reset(seed=1)
    play(used, actions[::-1])
    assert used.recycle()
    np.testing.assert_array_equal(used.reset(seed=8).obs, first)
    assert_same(play(used, actions), want)


def test_a_preprocessed_session_over_a_real_server(atari_server: ServerThread) -> None:
    local = AtariEnvironment(RECIPE)
    with EnvClient(atari_server.url, config=RECIPE) as env:
        assert env.spec.observation.shape == (4, 84, 84)
        assert env.spec.extra["config"]["stack_num"] == 4
        first = env.reset(seed=6)
        np.testing.assert_array_equal(first.observation, local.reset(seed=6).obs)
        for t, action in enumerate(np.random.default_rng(6).integers(0, 4, 200).tolist()):
            got, want = env.step(action), local.step(action)
            np.testing.assert_array_equal(got.observation, want.obs, err_msg=f"step {t}")
            assert (got.reward, got.terminated, got.truncated) == (
                want.reward,
                want.terminated,
                want.truncated,
            )
            if got.done:
                np.testing.assert_array_equal(env.reset().observation, local.reset().obs)
        snap = env.snapshot()
        after = env.step(2).observation
        env.restore(snap)
        np.testing.assert_array_equal(env.step(2).observation, after)


def test_a_snapshot_after_a_lost_life_restores_an_ended_episode() -> None:
    env = AtariEnvironment(RECIPE)
    env.reset(seed=2)
    for action in np.random.default_rng(9).integers(0, 4, 2000).tolist():
        result = env.step(action)
        if result.terminated:
            break
    assert result.terminated and result.info["lives"] > 0  # ended by a life, not the game
    snap = env.snapshot()
    env.reset(seed=3)
    restored = env.restore(snap)
    assert restored.terminated and restored.info == result.info
    np.testing.assert_array_equal(restored.obs, result.obs)


def test_stacked_ram_is_the_last_ram_observations() -> None:
    plain = AtariEnvironment({"obs_type": "ram"})
    stacked = AtariEnvironment({"obs_type": "ram", "stack_num": 3})
    first = plain.reset(seed=4).obs
    np.testing.assert_array_equal(stacked.reset(seed=4).obs, np.stack([first] * 3))
    seen = [first] * 3
    for action in np.random.default_rng(1).integers(0, 6, 100).tolist():
        seen.append(plain.step(action).obs)
        np.testing.assert_array_equal(stacked.step(action).obs, np.stack(seen[-3:]))


def test_a_frameskip_pair_pools_the_last_two_frames_of_its_draw() -> None:
    config = {"obs_type": "grayscale", "maxpool": True, "stack_num": 2, "noop_max": 10}
    fixed = AtariEnvironment({**config, "frameskip": 3})
    drawn = AtariEnvironment({**config, "frameskip": [3, 4]})  # always draws 3
    np.testing.assert_array_equal(fixed.reset(seed=1).obs, drawn.reset(seed=1).obs)
    for action in np.random.default_rng(2).integers(0, 6, 200).tolist():
        want, got = fixed.step(action), drawn.step(action)
        np.testing.assert_array_equal(got.obs, want.obs)
        assert (got.reward, got.info) == (want.reward, want.info)
