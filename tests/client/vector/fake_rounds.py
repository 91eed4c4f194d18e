"""Rounds of N fake environments stepped in-process: the reference the resume tests of
both vector clients compare with (no step lost, none applied twice)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from openenv_ws.testing import FakeEnvironment

__all__ = ["actions", "reference"]


def actions(t: int, n: int) -> np.ndarray:
    """The actions of round `t` for `n` envs."""
    return np.array([(3 * t + 5 * i + 1) % 4 for i in range(n)])


def reference(
    config: Mapping[str, Any], n: int, rounds: int, seed: int
) -> list[list[tuple[bytes, float, int]]]:
    """Per round, per env: (obs bytes, reward, step count) of uninterrupted in-process runs,
    env i reset with ``seed + i``."""
    envs = [FakeEnvironment(dict(config)) for _ in range(n)]
    first = [e.reset(seed=seed + i) for i, e in enumerate(envs)]
    rows = [[(np.asarray(r.obs).tobytes(), 0.0, 0) for r in first]]
    for t in range(rounds):
        results = [e.step(int(a)) for e, a in zip(envs, actions(t, n), strict=True)]
        rows.append([(np.asarray(r.obs).tobytes(), r.reward, r.info["step"]) for r in results])
    return rows
