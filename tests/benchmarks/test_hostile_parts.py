"""The hostile scenario's parts that need no server: the phase plan, the configs it opens,
the budget read from /health and the p99 corrected for coordinated omission."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from atari.config import normalize_config
from benchmarks.hostile import configs
from benchmarks.hostile.harness import PHASES, Settings, budget_of, phases
from benchmarks.hostile.report import corrected
from benchmarks.hostile.sessions import health_figures
from openenv_ws.environment import MAX_BATCH_OBS_BYTES


def test_hostile_plan_all_and_named() -> None:
    every = [p.key for p in phases(Settings(phases="all"))]
    assert every == ["baseline", *PHASES]
    named = [p.key for p in phases(Settings(phases="tls-idle, baseline,heavy"))]
    assert named == ["baseline", "tls-idle", "heavy"]
    with pytest.raises(ValueError, match="unknown hostile phase"):
        phases(Settings(phases="heavy,warp"))


def _obs_bytes(config: dict[str, Any]) -> int:
    channels = 3 if config["obs_type"] == "rgb" else 1
    return int(config["img_height"] * config["img_width"] * channels * config["stack_num"])


def test_hostile_configs_are_accepted_and_largest_first() -> None:
    heavy, largest = configs.heavy_configs(), configs.largest_configs()
    vector = configs.largest_vector_configs(configs.max_envs())
    for config in (*heavy, *largest, *vector):
        normalize_config(config)  # raises EnvConfigError on a bound
    assert heavy[0]["stack_num"] == 16 and heavy[0]["noop_max"] == 1000
    assert _obs_bytes(largest[0]) == max(_obs_bytes(c) for c in largest) == 16 << 20
    assert _obs_bytes(vector[0]) * configs.max_envs() <= MAX_BATCH_OBS_BYTES
    assert _obs_bytes(vector[0]) * 2 * configs.max_envs() > MAX_BATCH_OBS_BYTES


def test_hostile_budget_from_health() -> None:
    body = {
        "sessions": 3,
        "memory": {"used": 5 << 30, "budget": 16 << 30},
        "engine_threads": {"used": 4, "budget": 32},
        "pool": {"bytes": 7, "max_bytes": 2 << 30, "hits": 3},
    }
    figures = health_figures(body)
    assert figures == {
        "memory.used": float(5 << 30),
        "memory.budget": float(16 << 30),
        "engine_threads.used": 4.0,
        "engine_threads.budget": 32.0,
        "pool.bytes": 7.0,
        "pool.max_bytes": float(2 << 30),
    }
    assert budget_of(figures) == float(16 << 30)
    assert budget_of(health_figures({"sessions": 1})) is None


def test_hostile_p99_corrected_for_a_stall() -> None:
    steady = np.full(10_000, 0.5)
    assert np.array_equal(corrected(steady, 0.5), steady)
    stalled = np.append(steady, 10_000.0)  # one 10 s step among 5 s of 0.5 ms steps
    assert np.percentile(stalled, 99) == 0.5
    assert np.percentile(corrected(stalled, 0.5), 99) > 9_000.0
