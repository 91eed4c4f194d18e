"""A small deterministic environment for testing servers, clients and transports.

``FakeEnvironment`` needs no emulator: its observation is a function of the
seed, the step count and the last action, so any transport can be checked
against an in-process run bit for bit.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from .brief import brief
from .environment import ArraySpec, DiscreteSpec, Environment, EnvResult, EnvSpec, check_keys
from .errors import BadSnapshot, EnvConfigError, InvalidAction

__all__ = [
    "MAX_ACTIONS",
    "MAX_OBS_ELEMENTS",
    "MAX_STEPS",
    "MAX_STEP_SLEEP",
    "FakeEnvironment",
    "fake_factory",
]

_OPTIONS = ("obs_shape", "n_actions", "episode_length", "fail_at_step", "step_sleep")
#: Bounds of the options: elements of an observation, actions, steps, seconds of sleep.
MAX_OBS_ELEMENTS = 1 << 22
MAX_ACTIONS = 1024
MAX_STEPS = 2**31 - 1
MAX_STEP_SLEEP = 3600.0


class FakeEnvironment(Environment):
    """Deterministic toy environment.

    Config options: ``obs_shape`` (list of ints, default [4, 4]), ``n_actions``
    (default 4), ``episode_length`` (steps until ``terminated``, default 10),
    ``fail_at_step`` (raise RuntimeError on that step, for failure tests),
    ``step_sleep`` (seconds each step blocks, for concurrency tests).

    Bounds: at most :data:`MAX_OBS_ELEMENTS` observation elements (dimensions
    up to 4096), 1..:data:`MAX_ACTIONS` actions, 1..:data:`MAX_STEPS` for
    ``episode_length`` and ``fail_at_step``, 0..:data:`MAX_STEP_SLEEP` seconds
    of ``step_sleep``. Its calls take bounded time, so servers call them
    inline (:attr:`~openenv_ws.environment.Environment.inline`), unless it
    sleeps in ``step``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        config = dict(config or {})
        check_keys(config, _OPTIONS, "fake environment")
        shape = config.get("obs_shape", [4, 4])
        if (
            not isinstance(shape, list)
            or not 1 <= len(shape) <= 4
            or not all(type(d) is int and 0 < d <= 4096 for d in shape)
            or math.prod(shape) > MAX_OBS_ELEMENTS
        ):
            raise EnvConfigError(
                "option 'obs_shape' must be a list of 1-4 integers in 1..4096 with at most "
                f"{MAX_OBS_ELEMENTS} elements in all, got {brief(shape)}"
            )
        self._shape = tuple(shape)
        size = math.prod(self._shape)
        self._pattern = (np.arange(size) % 256).astype(np.uint8).reshape(self._shape)
        self._n = _bounded(config, "n_actions", 4, MAX_ACTIONS)
        self._length = _bounded(config, "episode_length", 10, MAX_STEPS)
        self._fail_at = _bounded(config, "fail_at_step", None, MAX_STEPS)
        sleep = config.get("step_sleep", 0.0)
        if type(sleep) not in (int, float) or not 0 <= sleep <= MAX_STEP_SLEEP:
            raise EnvConfigError(
                f"option 'step_sleep' must be a number of seconds in 0..{MAX_STEP_SLEEP:g}, "
                f"got {brief(sleep)}"
            )
        self._sleep = float(sleep)
        # Sleeping steps take as long as asked: servers call them off their event loop.
        self.inline = not self._sleep
        self._spec = EnvSpec(
            action=DiscreteSpec(self._n, tuple(f"A{i}" for i in range(self._n))),
            observation=ArraySpec(self._shape, "uint8", 0, 255),
            extra={"env": "fake", "config": config},
        )
        self._as_built()

    def _as_built(self) -> None:
        self._seed = 0
        self._steps = 0
        self._total = 0
        self._episode_id: str | None = None
        self._last_action = 0

    def recycle(self) -> bool:
        self._as_built()
        return True

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def _obs(self) -> np.ndarray[Any, Any]:
        base = (self._seed * 31 + self._steps * 7 + self._last_action * 3) % 256
        # uint8 addition wraps modulo 256, which is the pattern we want.
        return self._pattern + np.uint8(base)

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        if seed is not None:
            self._seed = seed % (1 << 31)
        self._steps = 0
        self._last_action = 0
        self._episode_id = episode_id or uuid.uuid4().hex
        return EnvResult(self._obs(), info={"step": 0})

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        if not (type(action) is int and 0 <= action < self._n):
            raise InvalidAction(f"action {brief(action)} is not an integer in [0, {self._n})")
        if self._fail_at is not None and self._steps + 1 == self._fail_at:
            raise RuntimeError("fake environment failure (fail_at_step)")
        if self._sleep:
            time.sleep(self._sleep)
        self._steps += 1
        self._total += 1
        self._last_action = action
        terminated = self._steps >= self._length
        return EnvResult(
            self._obs() if obs else None,
            reward=float(action),
            terminated=terminated,
            info={"step": self._steps},
        )

    def state(self) -> dict[str, Any]:
        return {"episode_id": self._episode_id, "step_count": self._steps, "seed": self._seed}

    def snapshot(self) -> bytes:
        data: bytes = msgpack.packb([self._seed, self._steps, self._last_action, self._episode_id])
        return data

    def restore(self, snapshot: bytes) -> EnvResult:
        try:
            seed, steps, last, episode_id = msgpack.unpackb(snapshot)
            if not all(type(v) is int for v in (seed, steps, last)):
                raise ValueError("counters must be integers")
        except Exception as exc:  # noqa: BLE001 - any bad snapshot is the caller's error
            raise BadSnapshot(f"snapshot is not one of this environment's: {exc}") from None
        self._seed, self._steps, self._last_action, self._episode_id = seed, steps, last, episode_id
        return EnvResult(self._obs(), info={"step": self._steps})


def _bounded(config: Mapping[str, Any], key: str, default: int | None, maximum: int) -> Any:
    value = config.get(key, default)
    if value is None and default is None:  # an optional option left out (or nil)
        return None
    if type(value) is not int or not 0 < value <= maximum:
        raise EnvConfigError(
            f"option {key!r} must be an integer in 1..{maximum}, got {brief(value)}"
        )
    return value


def fake_factory(config: dict[str, Any]) -> FakeEnvironment:
    """An :data:`~openenv_ws.environment.EnvFactory` for :class:`FakeEnvironment`."""
    return FakeEnvironment(config)
