"""A seeded random rollout of any Gymnasium env, to compare two envs step by step."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np


def play(env: gymnasium.Env[Any, Any], seed: int, steps: int) -> list[tuple[Any, ...]]:
    """Observations, rewards, flags and lives of `steps` random steps, resets included."""
    obs, _ = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(np.array(obs),)]
    rng = np.random.default_rng(seed)
    n = env.action_space.n  # type: ignore[attr-defined]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(n)))
        out.append((np.array(obs), reward, terminated, truncated, info["lives"]))
        if terminated or truncated:
            obs, _ = env.reset()
            out.append((np.array(obs),))
    return out


def assert_same_rollouts(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(a[0], b[0], err_msg=f"item {i}")
        assert a[1:] == b[1:], i
