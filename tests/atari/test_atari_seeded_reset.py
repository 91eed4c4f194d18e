"""Seeded resets restore the state a ROM load leaves instead of loading again.

ale-py reloads the ROM on ``reset(seed=...)``; AtariEnvironment restores the
post-load state with the emulator's generator seeded as the load would have
(see ``atari.ale_state.PostLoadState``). These tests hold it to ale-py's
results bit for bit, check that no load happens, and that games whose load
draws from that generator keep reloading.
"""

from __future__ import annotations

from typing import Any

import ale_py
import gymnasium
import numpy as np
import pytest
from ale_py import roms

from atari import AtariEnvironment

from .test_atari_gym_parity import _assert_same_reset, _gym_id

gymnasium.register_envs(ale_py)

# 0, the largest 31- and 32-bit values, and beyond: SeedSequence takes any size.
SEEDS = (0, 1, 2**31 - 1, 2**32 - 1, 2**32, 2**64 + 12345)


class _CountingALE:
    """The environment's own ALEInterface, counting its loadROM calls."""

    def __init__(self, ale: ale_py.ALEInterface) -> None:
        self.ale = ale
        self.loads = 0

    def loadROM(self, path: Any) -> None:
        self.loads += 1
        self.ale.loadROM(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ale, name)


def _count_loads(env: AtariEnvironment) -> _CountingALE:
    spy = _CountingALE(env._ale)  # type: ignore[arg-type]
    env._ale = spy  # type: ignore[assignment]
    return spy


def _play_elsewhere(env: AtariEnvironment, rng: np.random.Generator, steps: int) -> None:
    # Leave the emulator, its generators and ALE's repeat candidate wherever a
    # different episode takes them, so a seeded reset cannot lean on a fresh instance.
    env.reset()
    for _ in range(steps):
        r = env.step(int(rng.integers(env.spec.action.n)))
        if r.done:
            env.reset()


def _assert_same_steps(
    gym_env: Any, ours: AtariEnvironment, rng: np.random.Generator, steps: int
) -> None:
    for t in range(steps):
        action = int(rng.integers(ours.spec.action.n))
        obs, reward, terminated, truncated, info = gym_env.step(action)
        got = ours.step(action)
        np.testing.assert_array_equal(got.obs, obs, err_msg=f"step {t}")
        assert (got.reward, got.terminated, got.truncated, got.info) == (
            reward,
            terminated,
            truncated,
            info,
        ), f"step {t}"
        if terminated or truncated:
            _assert_same_reset(gym_env.reset(), ours.reset())


@pytest.mark.parametrize(
    ("game", "config"),
    [
        ("pong", {}),
        ("breakout", {"obs_type": "grayscale", "frameskip": (2, 5)}),
        ("space_invaders", {"mode": 3, "difficulty": 1}),
        ("ms_pacman", {"obs_type": "ram", "mode": 2}),
        ("freeway", {"difficulty": 1, "repeat_action_probability": 0.9}),
    ],
)
def test_seeded_reset_matches_a_fresh_gymnasium_env(game: str, config: dict[str, Any]) -> None:
    ours_config = {
        k: list(v) if isinstance(v, tuple) else v for k, v in {"game": game, **config}.items()
    }
    ours = AtariEnvironment(ours_config)
    assert ours._post_load is not None
    spy = _count_loads(ours)
    rng = np.random.default_rng(len(game))
    try:
        for seed in SEEDS:
            _play_elsewhere(ours, rng, 150)
            gym_env = gymnasium.make(_gym_id(game), **config)
            try:
                _assert_same_reset(gym_env.reset(seed=seed), ours.reset(seed=seed))
                _assert_same_steps(gym_env, ours, rng, 120)
            finally:
                gym_env.close()
    finally:
        ours.close()
    assert spy.loads == 0


def test_restoring_and_reloading_give_the_same_episodes() -> None:
    config = {"game": "breakout", "frameskip": [2, 6], "obs_type": "ram"}
    fast, reloading = AtariEnvironment(config), AtariEnvironment(config)
    reloading._post_load = None  # the fallback: load the ROM as ale-py does
    fast_spy, reloading_spy = _count_loads(fast), _count_loads(reloading)
    traces: list[list[Any]] = [[], []]
    try:
        for env, trace in ((fast, traces[0]), (reloading, traces[1])):
            rng = np.random.default_rng(3)
            for seed in (5, 2**40, 5):
                first = env.reset(seed=seed)
                trace.append((first.obs.tobytes(), first.info))
                for _ in range(80):
                    r = env.step(int(rng.integers(env.spec.action.n)))
                    trace.append((r.obs.tobytes(), r.reward, r.done, r.info))
    finally:
        fast.close()
        reloading.close()
    assert traces[0] == traces[1]
    assert (fast_spy.loads, reloading_spy.loads) == (0, 3)


@pytest.mark.parametrize(("game", "mode"), [("pong", None), ("space_invaders", 3)])
def test_rebuilt_state_is_byte_for_byte_what_a_load_leaves(game: str, mode: int | None) -> None:
    env = AtariEnvironment({"game": game, "mode": mode})
    try:
        assert env._post_load is not None
        for seed in SEEDS:
            ale_seed = int(np.random.SeedSequence(seed).generate_state(2)[1])
            ale = ale_py.ALEInterface()
            ale.setFloat("repeat_action_probability", 0.25)
            ale.setInt("max_num_frames_per_episode", 108_000)
            ale.setInt("random_seed", ale_seed - (1 << 32) if ale_seed >= 1 << 31 else ale_seed)
            ale.loadROM(roms.get_rom_path(game))
            loaded = ale.cloneState(include_rng=True).serialize()
            assert env._post_load.serialized(ale_seed) == loaded, f"seed {seed}"
    finally:
        env.close()


@pytest.mark.parametrize("game", ["berzerk", "double_dunk"])
def test_games_whose_load_draws_sticky_actions_reload(game: str) -> None:
    # Their ROM settings press buttons while loading, so ALE draws sticky-action
    # numbers then and the loaded state can depend on the seed: no shortcut.
    ours = AtariEnvironment({"game": game})
    assert ours._post_load is None
    spy = _count_loads(ours)
    gym_env = gymnasium.make(_gym_id(game))
    try:
        _play_elsewhere(ours, np.random.default_rng(1), 50)
        _assert_same_reset(gym_env.reset(seed=9), ours.reset(seed=9))
        _assert_same_steps(gym_env, ours, np.random.default_rng(2), 100)
    finally:
        gym_env.close()
        ours.close()
    assert spy.loads == 1
