"""Gymnasium environments by id as an openenv-ws environment plugin (entry point ``gymnasium``).

A session's config names the environment: ``{"id": "CartPole-v1", "kwargs": {...}}``;
``kwargs`` (plain values) go to ``gymnasium.make``, ``max_episode_steps`` included.

Ids import code, so only allowed ids are made: by default Gymnasium's own
classic-control and toy-text ids (:data:`DEFAULT_IDS`, nothing to install
beyond Gymnasium). The environment variable :data:`IDS_ENV` (comma-separated
ids) replaces that list for a server; :func:`gymnasium_plugin` builds a plugin
with a list of its own.

Spaces carried: the observation a ``Box``; the action a ``Discrete`` (starting
at 0) or a ``Box``. Other spaces are refused at ``open``. Per-element bounds of
a Box that are not uniform travel in ``spec.extra`` (``observation_low``,
``observation_high``, ``action_low``, ``action_high``, nested lists, infinities
as None) while the ArraySpec's scalar ``low``/``high`` stay None.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..brief import brief
from ..environment import ArraySpec, DiscreteSpec, Environment, EnvResult, EnvSpec, check_keys
from ..errors import EnvConfigError, InvalidAction
from ..registry import EnvPlugin

__all__ = [
    "DEFAULT_IDS",
    "IDS_ENV",
    "GymnasiumEnvironment",
    "gymnasium_factory",
    "gymnasium_plugin",
]

#: Environment variable: comma-separated Gymnasium ids a server may make (replaces DEFAULT_IDS).
IDS_ENV = "OPENENV_WS_GYM_IDS"

#: Gymnasium's classic-control and toy-text ids (no extra package needed), as of Gymnasium 1.4
#: (older releases refuse the ids they do not know yet, e.g. Taxi-v4, at open).
DEFAULT_IDS: tuple[str, ...] = (
    "Acrobot-v1",
    "CartPole-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
    "Blackjack-v1",
    "CliffWalking-v1",
    "CliffWalkingSlippery-v1",
    "FrozenLake-v1",
    "FrozenLake8x8-v1",
    "Taxi-v4",
)

_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any, where: str) -> Any:
    """`value` if it is plain data (numbers, strings, bools, None, lists and string maps)."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, list):
        return [_plain(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, where) for k, v in value.items()}
    raise EnvConfigError(f"{where} must hold plain values, got {brief(value)}")


def _info(value: Any) -> Any:
    """Gymnasium's info as plain data: numpy scalars as numbers, arrays kept as arrays."""
    if isinstance(value, dict):
        return {str(k): _info(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_info(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _bounds(values: np.ndarray[Any, Any]) -> float | int | None:
    """One scalar for bounds that are all equal and finite, else None."""
    if values.size == 0 or not np.all(values == values.flat[0]):
        return None
    first = values.flat[0].item()
    return first if math.isfinite(first) else None


def _bounds_list(values: np.ndarray[Any, Any]) -> list[Any]:
    """Per-element bounds as nested lists, infinities as None."""
    bounds: list[Any] = _finite_or_none(values.astype(np.float64).tolist())
    return bounds


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value if math.isfinite(value) else None


def _box_spec(space: Any, name: str, extra: dict[str, Any]) -> ArraySpec:
    low, high = _bounds(space.low), _bounds(space.high)
    if low is None or high is None:
        extra[f"{name}_low"] = _bounds_list(space.low)
        extra[f"{name}_high"] = _bounds_list(space.high)
    return ArraySpec(tuple(space.shape), space.dtype.name, low, high)


class GymnasiumEnvironment(Environment):
    """One ``gymnasium.make(id, **kwargs)`` instance, stepped on its session's worker thread."""

    inline = False

    def __init__(self, config: Mapping[str, Any], allowed: tuple[str, ...] | None = None) -> None:
        try:
            import gymnasium
            from gymnasium import spaces
        except ImportError:
            raise EnvConfigError(
                "Gymnasium is not installed on this server (pip install 'openenv-ws[gym]')"
            ) from None

        check_keys(config, ("id", "kwargs"), "gymnasium environment")
        env_id = config.get("id")
        if not isinstance(env_id, str):
            raise EnvConfigError(f"option 'id' must be a Gymnasium id string, got {brief(env_id)}")
        ids = allowed if allowed is not None else allowed_ids()
        if env_id not in ids:
            raise EnvConfigError(
                f"Gymnasium id {env_id!r} is not allowed on this server (allowed: "
                f"{', '.join(ids)}); allow it with the environment variable {IDS_ENV}"
            )
        kwargs = config.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise EnvConfigError(f"option 'kwargs' must be a map, got {brief(kwargs)}")
        kwargs = _plain(kwargs, "option 'kwargs'")
        try:
            env = gymnasium.make(env_id, **kwargs)
        except Exception as exc:  # noqa: BLE001 - gymnasium.make raises any kind for a bad config
            raise EnvConfigError(f"gymnasium.make({env_id!r}) failed: {exc}") from None
        extra: dict[str, Any] = {"id": env_id}
        try:
            obs_space, act_space = env.observation_space, env.action_space
            if not isinstance(obs_space, spaces.Box):
                raise EnvConfigError(
                    f"observation space {type(obs_space).__name__} of {env_id!r} is not carried yet"
                )
            observation = _box_spec(obs_space, "observation", extra)
            action: DiscreteSpec | ArraySpec
            if isinstance(act_space, spaces.Discrete):
                if int(act_space.start) != 0:
                    raise EnvConfigError(
                        f"action space Discrete(start={int(act_space.start)}) of {env_id!r} "
                        "is not carried yet (only Discrete starting at 0)"
                    )
                action = DiscreteSpec(int(act_space.n))
            elif isinstance(act_space, spaces.Box):
                action = _box_spec(act_space, "action", extra)
            else:
                raise EnvConfigError(
                    f"action space {type(act_space).__name__} of {env_id!r} is not carried yet"
                )
        except BaseException:
            env.close()
            raise
        self._env = env
        self._id = env_id
        self._act_space = act_space
        self._spec = EnvSpec(action, observation, extra)
        self._episode_id: str | None = None
        self._steps = 0

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        obs, info = self._env.reset(seed=seed, options=dict(options) if options else None)
        self._episode_id = episode_id or uuid.uuid4().hex
        self._steps = 0
        return EnvResult(np.asarray(obs), info=_info(info))

    def _action(self, action: Any) -> Any:
        spec = self._spec.action
        if isinstance(spec, DiscreteSpec):
            if not spec.contains(action):
                raise InvalidAction(
                    f"action must be an integer in 0..{spec.n - 1}, got {brief(action)}"
                )
            return action
        if isinstance(action, int | float) and not isinstance(action, bool):
            action = [action]
        if isinstance(action, list):
            try:
                action = np.asarray(action, dtype=spec.dtype)
            except (TypeError, ValueError):
                raise InvalidAction(
                    f"action must be numbers of shape {list(spec.shape)}, got {brief(action)}"
                ) from None
        if not isinstance(action, np.ndarray) or action.dtype.kind not in "fiu":
            raise InvalidAction(
                f"action must be a numeric array of shape {list(spec.shape)}, got {brief(action)}"
            )
        if action.shape != spec.shape:
            raise InvalidAction(
                f"action must have shape {list(spec.shape)}, got shape {list(action.shape)}"
            )
        if not np.all(np.isfinite(action)):
            raise InvalidAction("action must be finite (no NaN or infinity)")
        return action.astype(spec.dtype, copy=False)

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        obs_, reward, terminated, truncated, info = self._env.step(self._action(action))
        self._steps += 1
        return EnvResult(
            np.asarray(obs_) if obs else None,
            float(reward),
            bool(terminated),
            bool(truncated),
            _info(info),
        )

    def state(self) -> dict[str, Any]:
        return {"episode_id": self._episode_id, "step_count": self._steps, "id": self._id}

    def close(self) -> None:
        self._env.close()


def allowed_ids() -> tuple[str, ...]:
    """The ids this process may make: :data:`IDS_ENV` if set, else :data:`DEFAULT_IDS`."""
    text = os.environ.get(IDS_ENV, "").strip()
    if not text:
        return DEFAULT_IDS
    return tuple(i.strip() for i in text.split(",") if i.strip())


def gymnasium_plugin(
    allowed: tuple[str, ...] | None = None,
) -> EnvPlugin[GymnasiumEnvironment]:
    """A plugin making the Gymnasium ids in `allowed` (None: :func:`allowed_ids` at each open)."""
    factory: Callable[[dict[str, Any]], GymnasiumEnvironment] = lambda config: (  # noqa: E731
        GymnasiumEnvironment(config, allowed)
    )
    return EnvPlugin(factory)


#: The ``gymnasium`` entry point: ids from :func:`allowed_ids`.
gymnasium_factory: EnvPlugin[GymnasiumEnvironment] = gymnasium_plugin()
