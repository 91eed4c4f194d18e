"""Gymnasium environments by id as an openenv-ws environment plugin (entry point ``gymnasium``).

A session's config names the environment: ``{"id": "CartPole-v1", "kwargs": {...}}``;
``kwargs`` go to ``gymnasium.make``, each key only if the id's policy allows it and its
value within its bound (:mod:`openenv_ws.envs.gym_kwargs`: numbers, flags, small grids,
``max_episode_steps`` for every id; never a path, module, class or callable), checked
before anything is built; ``openenv-ws serve --gym-kwargs ID:KEY`` widens it.
An id of the form ``"module:Id"`` imports ``module`` first (Gymnasium's own rule),
e.g. ``"gymnasium_robotics:PointMaze_UMaze-v3"``.

Ids import code, so only allowed ids are made: by default Gymnasium's own
classic-control, toy-text and MuJoCo v5 ids (:data:`DEFAULT_IDS`; MuJoCo's
need ``mujoco`` installed). ``openenv-ws serve --gym-ids ID,ID`` or the environment
variable :data:`IDS_ENV` (the option wins when both are given) replaces that
list for a server; :func:`gymnasium_plugin` builds a plugin with a list of its
own.

Every Gymnasium space but Graph, Sequence and OneOf is carried (SPEC section
22, the mapping in :mod:`openenv_ws.gymspaces`): Box with per-element bounds,
Discrete with a start, MultiDiscrete, MultiBinary, Text, Dict and Tuple, nested.
Observations travel as wire values (a Tuple as a list, a Dict as a map in the
space's key order, a Discrete as an int); an action is checked against the
action space and handed to the environment as Gymnasium's value (a list as a
tuple for a Tuple space), or refused with ``invalid_action`` saying why.
Spaces other than a Box observation with a Box or Discrete (from 0) action
need a client that reads structured values (``structured`` in ``open``).

Frames: with ``"render": true`` in the config the environment is made with
``render_mode="rgb_array"`` and the info of every result (reset and step)
carries the frame under ``info["render"]``, a uint8 array of shape
``(height, width, 3)``, at most 1024x1024 pixels (:data:`~.gym_kwargs.RENDER_MAX_BYTES`;
a larger frame is refused with ``unsupported``), so that a remote episode can be recorded. MuJoCo
environments render headless with ``MUJOCO_GL=egl`` (or ``osmesa``) set on
the server; stepping needs no rendering.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..brief import brief
from ..environment import Environment, EnvResult, EnvSpec, check_keys
from ..errors import EnvConfigError, InvalidState
from ..registry import EnvPlugin
from ..spaces import ArraySpec, Space, SpaceError, space_from_wire
from .gym_kwargs import RENDER_MAX_BYTES, RENDER_SIDE_MAX, check_kwargs, widened_keys

__all__ = [
    "DEFAULT_IDS",
    "IDS_ENV",
    "RENDER_KEY",
    "GymnasiumEnvironment",
    "allowed_ids",
    "check_config",
    "gymnasium_factory",
    "gymnasium_plugin",
]

#: Environment variable: comma-separated Gymnasium ids a server may make (replaces
#: DEFAULT_IDS; ``serve --gym-ids`` sets it for its server).
IDS_ENV = "OPENENV_WS_GYM_IDS"

#: The config key asking for frames, and the info key that carries them.
RENDER_KEY = "render"

#: Gymnasium's own ids, whose code ships with Gymnasium 1.4 (older releases refuse the ids
#: they do not know yet, e.g. Taxi-v4, at open): classic control and toy text (nothing to
#: install beyond Gymnasium), and the MuJoCo v5 tasks (they need ``pip install mujoco``;
#: without it they are refused at open saying so).
_PURE_PYTHON: tuple[str, ...] = (
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
_MUJOCO: tuple[str, ...] = (
    "Ant-v5",
    "HalfCheetah-v5",
    "Hopper-v5",
    "Humanoid-v5",
    "HumanoidStandup-v5",
    "InvertedDoublePendulum-v5",
    "InvertedPendulum-v5",
    "Pusher-v5",
    "Reacher-v5",
    "Swimmer-v5",
    "Walker2d-v5",
)
DEFAULT_IDS: tuple[str, ...] = _PURE_PYTHON + _MUJOCO

#: Ids whose every call returns within microseconds (pure Python and numpy, no I/O):
#: their sessions run inline on the event loop, the fastest way (Environment.inline),
#: unless they render. Others run on their session's worker thread.
BOUNDED_IDS = frozenset(_PURE_PYTHON)


def _info(value: Any) -> Any:
    """Gymnasium's info as plain data: numpy scalars as numbers, arrays kept as arrays."""
    if isinstance(value, dict):
        return {str(k): _info(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_info(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _carried(space_of: Callable[[Any], Space], space: Any, what: str) -> Space:
    """The section 22 form of a Gymnasium space, held to the limits a client reads spaces with."""
    try:
        spec = space_of(space)
        space_from_wire(spec.to_wire())
    except SpaceError as exc:
        raise EnvConfigError(f"the {what}, {space}, is not carried: {exc}") from None
    return spec


class GymnasiumEnvironment(Environment):
    """One ``gymnasium.make(id, **kwargs)`` instance, stepped on its session's worker thread."""

    inline = False

    def __init__(
        self,
        config: Mapping[str, Any],
        allowed: tuple[str, ...] | None = None,
        widened: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        try:
            import gymnasium

            from .. import gymspaces
        except ImportError:
            raise EnvConfigError(
                "Gymnasium is not installed on this server (pip install 'openenv-ws[gym]')"
            ) from None

        checked = check_config(config, allowed, widened)
        env_id, kwargs, render = checked["id"], dict(checked["kwargs"]), checked[RENDER_KEY]
        if render:
            kwargs["render_mode"] = "rgb_array"
        try:
            env = gymnasium.make(env_id, **kwargs)
        except Exception as exc:  # noqa: BLE001 - gymnasium.make raises any kind for a bad config
            raise EnvConfigError(f"gymnasium.make({env_id!r}) failed: {exc}") from None
        try:
            spec = EnvSpec(
                _carried(gymspaces.space_of, env.action_space, f"action space of {env_id!r}"),
                _carried(
                    gymspaces.space_of, env.observation_space, f"observation space of {env_id!r}"
                ),
                {"id": env_id},
            )
        except BaseException:
            env.close()
            raise
        self._env = env
        self._id = env_id
        self._render = render
        self.inline = env_id in BOUNDED_IDS and not render
        self._spec = spec
        self._array_obs = isinstance(spec.observation, ArraySpec)
        self._to_wire = gymspaces.to_wire
        self._gym_action = gymspaces.gym_action
        self._action_space = gymspaces.unbounded(spec.action)
        self._episode_id: str | None = None
        self._steps = 0

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def _obs(self, obs: Any) -> Any:
        space = self._spec.observation
        return np.asarray(obs) if isinstance(space, ArraySpec) else self._to_wire(space, obs)

    def _result_info(self, info: Any) -> dict[str, Any]:
        out: dict[str, Any] = _info(info)
        if self._render:
            frame: Any
            try:
                frame = self._env.render()
            except Exception as exc:  # noqa: BLE001 - a missing renderer (pygame, OpenGL) raises any kind
                frame = exc
            if not (
                isinstance(frame, np.ndarray)
                and frame.dtype == np.uint8
                and frame.ndim == 3
                and frame.shape[2] == 3
            ):
                got = f"failed: {frame}" if isinstance(frame, Exception) else f"gave {brief(frame)}"
                raise InvalidState(
                    f"rendering {self._id!r} {got}, not an RGB uint8 frame; open the session "
                    f"without {RENDER_KEY!r} (or install the renderer on the server)",
                    code="unsupported",
                )
            if frame.nbytes > RENDER_MAX_BYTES:
                raise InvalidState(
                    f"rendering {self._id!r} gave a frame of {frame.shape[0]}x{frame.shape[1]} "
                    f"pixels, more than the {RENDER_SIDE_MAX}x{RENDER_SIDE_MAX} a result may "
                    f"carry; open the session with smaller width and height kwargs, or without "
                    f"{RENDER_KEY!r}",
                    code="unsupported",
                )
            out[RENDER_KEY] = frame
        return out

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
        return EnvResult(self._obs(obs), info=self._result_info(info))

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        obs_, reward, terminated, truncated, info = self._env.step(
            self._gym_action(self._action_space, action)
        )
        self._steps += 1
        return EnvResult(
            (obs_ if self._array_obs and type(obs_) is np.ndarray else self._obs(obs_))
            if obs
            else None,
            float(reward),
            bool(terminated),
            bool(truncated),
            self._result_info(info) if info or self._render else {},
        )

    def state(self) -> dict[str, Any]:
        return {"episode_id": self._episode_id, "step_count": self._steps, "id": self._id}

    def close(self) -> None:
        self._env.close()


def check_config(
    config: Mapping[str, Any],
    allowed: tuple[str, ...] | None = None,
    widened: Mapping[str, frozenset[str]] | None = None,
) -> dict[str, Any]:
    """`config` with its kwargs as ``gymnasium.make`` gets them, if this server may build it.

    Nothing is imported, built or opened: the id must be allowed (`allowed`, None:
    :func:`allowed_ids`) and every kwarg within the id's policy (:mod:`.gym_kwargs`;
    `widened` None: the operator's :data:`~.gym_kwargs.KWARGS_ENV`).

    Raises:
        EnvConfigError: an unknown option, an id not allowed, a kwarg not allowed or out of
            its bound, or ``render`` that is not a bool.
    """
    check_keys(config, ("id", "kwargs", RENDER_KEY), "gymnasium environment")
    env_id = config.get("id")
    if not isinstance(env_id, str):
        raise EnvConfigError(f"option 'id' must be a Gymnasium id string, got {brief(env_id)}")
    ids = allowed if allowed is not None else allowed_ids()
    if env_id not in ids:
        raise EnvConfigError(
            f"Gymnasium id {brief(env_id)} is not allowed on this server (allowed: "
            f"{', '.join(ids)}); allow it with `openenv-ws serve --gym-ids` or the "
            f"environment variable {IDS_ENV}"
        )
    kwargs = config.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise EnvConfigError(f"option 'kwargs' must be a map, got {brief(kwargs)}")
    if "render_mode" in kwargs:
        raise EnvConfigError(
            f"kwargs 'render_mode' is not for a server; ask for rgb_array frames with "
            f'"{RENDER_KEY}": true in the config'
        )
    kwargs = check_kwargs(
        env_id,
        kwargs,
        widened if widened is not None else widened_keys(),
    )
    render = config.get(RENDER_KEY, False)
    if not isinstance(render, bool):
        raise EnvConfigError(f"option {RENDER_KEY!r} must be true or false, got {brief(render)}")
    return {"id": env_id, "kwargs": kwargs, RENDER_KEY: render}


def allowed_ids() -> tuple[str, ...]:
    """The ids this process may make: :data:`IDS_ENV` if set, else :data:`DEFAULT_IDS`."""
    text = os.environ.get(IDS_ENV, "").strip()
    if not text:
        return DEFAULT_IDS
    return tuple(i.strip() for i in text.split(",") if i.strip())


def gymnasium_plugin(
    allowed: tuple[str, ...] | None = None,
    widened: Mapping[str, Iterable[str]] | None = None,
) -> EnvPlugin[GymnasiumEnvironment]:
    """A plugin making the Gymnasium ids in `allowed` (None: :func:`allowed_ids` at each open).

    `widened` maps ids to the kwargs keys allowed beyond the policy (any plain value; None:
    :data:`~.gym_kwargs.KWARGS_ENV` at each open). Every config is checked by
    :func:`check_config` before anything is built.
    """
    wider = None if widened is None else {i: frozenset(k) for i, k in widened.items()}
    factory: Callable[[dict[str, Any]], GymnasiumEnvironment] = lambda config: (  # noqa: E731
        GymnasiumEnvironment(config, allowed, wider)
    )
    return EnvPlugin(factory, build_off_loop=True)


#: The ``gymnasium`` entry point: ids from :func:`allowed_ids`.
gymnasium_factory: EnvPlugin[GymnasiumEnvironment] = gymnasium_plugin()
