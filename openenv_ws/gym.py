"""Gymnasium adapters: remote sessions as ``gymnasium.Env`` and ``gymnasium.vector.VectorEnv``.

Existing RL code runs unchanged against a server::

    from openenv_ws.gym import RemoteEnv, RemoteVectorEnv

    env = RemoteEnv("ws://127.0.0.1:8000", config={"game": "pong", "frameskip": 1})
    env = gymnasium.make("openenv_ws/Remote-v0", url="ws://...", config={...})  # the same
    env = gymnasium.wrappers.AtariPreprocessing(env)      # needs frameskip=1 on the server

    envs = RemoteVectorEnv("ws://127.0.0.1:8000", 16, config={"game": "pong"})
    envs = gymnasium.make_vec("openenv_ws/Remote-v0", 16, url="ws://...", config={...})  # the same
    obs, infos = envs.reset(seed=0)

The id exists once this module is imported. Gymnasium 1.x loads no plugin
entry points, so without an import spell it ``"openenv_ws.gym:openenv_ws/Remote-v0"``:
Gymnasium imports the module before looking the id up.

Spaces come from the session spec: a discrete action spec becomes
``Discrete(n)``, an array spec a ``Box`` with its shape, dtype and bounds.
For Atari sessions :class:`RemoteEnv` also offers the few pieces of ale-py's
environment that Gymnasium's Atari wrappers use (``ale.lives()``,
``ale.getScreenRGB``/``getScreenGrayscale`` from the last observation,
``get_action_meanings()``), so ``AtariPreprocessing`` works on top.

Requires ``gymnasium`` (``pip install 'openenv-ws[gym]'``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .client.sync import EnvClient
from .client.vector import VectorEnvClient
from .environment import ArraySpec, DiscreteSpec, EnvSpec
from .errors import EnvConfigError, InvalidState

__all__ = ["ENV_ID", "RemoteEnv", "RemoteVectorEnv", "space_from_spec"]

# VectorEnvClient's names of the autoreset modes (it also takes Gymnasium's).
_AUTORESET_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}

_NOT_RGB = "render_mode='rgb_array' needs RGB image observations; this session sends {}"

#: Registered Gymnasium id: ``gymnasium.make(ENV_ID, url=..., config=...)`` makes a :class:`RemoteEnv`.
ENV_ID = "openenv_ws/Remote-v0"


def space_from_spec(spec: DiscreteSpec | ArraySpec) -> spaces.Space[Any]:
    """The Gymnasium space of a session's action or observation spec."""
    if isinstance(spec, DiscreteSpec):
        return spaces.Discrete(spec.n)
    dtype = np.dtype(spec.dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low = info.min if spec.low is None else spec.low
        high = info.max if spec.high is None else spec.high
    elif dtype.kind == "b":
        low, high = 0, 1
    else:
        low = -np.inf if spec.low is None else spec.low
        high = np.inf if spec.high is None else spec.high
    return spaces.Box(low=low, high=high, shape=spec.shape, dtype=dtype)


class _Screen:
    """The part of ale-py's ``ALEInterface`` that Gymnasium's Atari wrappers call.

    Answers from the session's last result: the screen is the observation
    (so ``getScreenRGB`` needs ``obs_type="rgb"`` and ``getScreenGrayscale``
    ``obs_type="grayscale"``), the lives come from ``info["lives"]``.
    """

    def __init__(self, env: RemoteEnv) -> None:
        self._env = env

    def lives(self) -> int:
        return int(self._env._last_info.get("lives", 0))

    def _screen(self, obs_type: str, out: np.ndarray[Any, Any] | None) -> np.ndarray[Any, Any]:
        have = self._env.spec_extra.get("config", {}).get("obs_type")
        if have != obs_type:
            raise EnvConfigError(
                f"the {obs_type} screen was asked for, but the session sends {have} "
                f"observations; open it with obs_type={obs_type!r} (for AtariPreprocessing: "
                "grayscale_obs=True needs 'grayscale', grayscale_obs=False needs 'rgb')"
            )
        obs = self._env._last_obs
        if obs is None:
            raise InvalidState("no screen before the first reset; call reset() first")
        if out is None:
            return np.array(obs)
        np.copyto(out, obs)
        return out

    def getScreenRGB(self, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        return self._screen("rgb", out)

    def getScreenGrayscale(self, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        return self._screen("grayscale", out)


class RemoteEnv(gymnasium.Env[np.ndarray, Any]):
    """One remote session as a ``gymnasium.Env``.

    Args:
        url: the server (None: start a local server subprocess, stopped on close).
        config: the session's environment configuration.
        render_mode: None or ``"rgb_array"`` (the last observation, for image
            observations).
        **client_kwargs: passed to :class:`~openenv_ws.client.EnvClient`
            (``token``, ``timeout``, ...).

    Observations are the arrays the server sent (read-only); copy one before
    changing it in place.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012 - Gymnasium's API

    def __init__(
        self,
        url: str | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        **client_kwargs: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        if url is None:
            self.client: EnvClient[Any] = EnvClient.from_local(config=config, **client_kwargs)
        else:
            self.client = EnvClient(url, config=config, **client_kwargs)
        spec: EnvSpec = self.client.spec
        self.spec_extra: Mapping[str, Any] = spec.extra
        self.action_space = space_from_spec(spec.action)
        self.observation_space = space_from_spec(spec.observation)
        is_rgb = _is_rgb(spec.observation)
        self.metadata = {**self.metadata, "render_modes": ["rgb_array"] if is_rgb else []}
        if render_mode is not None and not is_rgb:
            self.client.close()
            raise EnvConfigError(_NOT_RGB.format(spec.observation))
        self._last_obs: np.ndarray[Any, Any] | None = None
        self._last_info: dict[str, Any] = {}
        if spec.extra.get("env") == "atari":
            # Read by Gymnasium's AtariPreprocessing (it refuses frame skipping on both sides).
            self._frameskip = spec.extra.get("config", {}).get("frameskip")
            self.ale = _Screen(self)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """Start an episode; a seed makes it reproducible (and seeds ``np_random``)."""
        super().reset(seed=seed)
        result = self.client.reset(seed=seed, options=options)
        seeds = result.info.get("seeds")
        if seed is not None and isinstance(seeds, list) and seeds:
            # An environment that derives its own seeds from `seed` (Atari, like ale-py)
            # reports them; the first seeds np_random as ale-py's env seeds its own.
            self._np_random, _ = seeding.np_random(int(seeds[0]))
        self._last_obs, self._last_info = result.observation, result.info
        return result.observation, result.info

    def step(
        self, action: Any
    ) -> tuple[np.ndarray[Any, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        """One step; returns ``(obs, reward, terminated, truncated, info)``."""
        result = self.client.step(action)
        self._last_obs, self._last_info = result.observation, result.info
        return result.observation, result.reward, result.terminated, result.truncated, result.info

    def render(self) -> np.ndarray[Any, Any] | None:
        """The last observation when ``render_mode="rgb_array"`` (RGB sessions only)."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return np.array(self._last_obs)

    def get_action_meanings(self) -> list[str]:
        """The names of the actions (ALE names such as ``"NOOP"`` for Atari)."""
        spec = self.client.spec.action
        return list(spec.meanings) if isinstance(spec, DiscreteSpec) else []

    def close(self) -> None:
        """Close the session (and the local server, if this env started one). Idempotent."""
        client = self.__dict__.get("client")
        if client is not None:
            client.close()


class RemoteVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """Remote sessions as a ``gymnasium.vector.VectorEnv``, over :class:`VectorEnvClient`.

    Args:
        urls: one server URL or several (env ``i`` uses ``urls[i % len(urls)]``).
        num_envs: number of sessions (default: one per URL).
        config: the configuration of every session (or ``configs``, one per env).
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value
            (``"next_step"``, the default; ``"same_step"``; ``"disabled"``, then
            reset ended envs with ``reset(options={"reset_mask": mask})``).
        render_mode: None or ``"rgb_array"`` (each env's last observation, for
            RGB image observations).
        **client_kwargs: passed to :class:`VectorEnvClient` (``token``,
            ``timeout``, ``busy_poll``, ``copy``, ...).

    The client stays reachable as ``.client`` for EnvPool-style
    ``send``/``recv``.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        configs: Sequence[Mapping[str, Any]] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        **client_kwargs: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.client = VectorEnvClient(
            urls,
            num_envs,
            config=config,
            configs=configs,
            autoreset_mode=autoreset_mode,
            **client_kwargs,
        )
        self.num_envs = self.client.num_envs
        spec = self.client.spec
        is_rgb = _is_rgb(spec.observation)
        mode = _AUTORESET_MODES[self.client.autoreset_mode]
        self.metadata = {"render_modes": ["rgb_array"] if is_rgb else [], "autoreset_mode": mode}
        self.render_mode = render_mode
        if render_mode is not None and not is_rgb:
            self.client.close()
            raise EnvConfigError(_NOT_RGB.format(spec.observation))
        self._last_obs: np.ndarray[Any, Any] | None = None
        self.single_action_space = space_from_spec(spec.action)
        self.single_observation_space = space_from_spec(spec.observation)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        # What gymnasium.make_vec(ENV_ID, ...) records (it sets its own when it makes the env);
        # gymnasium.make_vec(envs.spec) makes the same sessions again. The token stays out.
        self.spec = copy.copy(gymnasium.spec(ENV_ID))
        given = {"config": config, "configs": configs, "render_mode": render_mode}
        self.spec.kwargs = {
            "url": urls,
            **{k: v for k, v in given.items() if v is not None},
            "autoreset_mode": mode.value,
            **{k: v for k, v in client_kwargs.items() if k != "token"},
            "num_envs": self.num_envs,
            "vectorization_mode": "vector_entry_point",
        }

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """Reset all envs, or those of ``options["reset_mask"]``; an int seed gives env i ``seed + i``."""
        if isinstance(seed, int):
            super().reset(seed=seed)
        rest = dict(options or {})
        mask = rest.pop("reset_mask", None)
        env_ids = None if mask is None else np.flatnonzero(np.asarray(mask, np.bool_))
        if env_ids is not None and isinstance(seed, list) and len(seed) == self.num_envs:
            seed = [seed[i] for i in env_ids]
        obs, infos = self.client.reset(seed=seed, options=rest, env_ids=env_ids)
        self._last_obs = obs
        return obs, infos

    def step(
        self, actions: np.ndarray[Any, Any]
    ) -> tuple[
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        dict[str, Any],
    ]:
        """Step every env; the result arrays have one row per env.

        In same-step autoreset mode ``infos["final_obs"]`` is an object array
        (None for envs that did not end) and ``infos["final_info"]`` a dict of
        arrays with ``_key`` masks, as Gymnasium's own vector envs give them.

        Raises:
            ValueError: ``actions`` does not have shape ``(num_envs, ...)``.
        """
        obs, rewards, terminations, truncations, infos = self.client.step(actions)
        self._last_obs = obs
        return obs, rewards, terminations, truncations, infos

    def render(self) -> tuple[np.ndarray[Any, Any], ...] | None:
        """The last observation of each env when ``render_mode="rgb_array"`` (RGB sessions)."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return tuple(np.array(frame) for frame in self._last_obs)

    def close_extras(self, **kwargs: Any) -> None:
        self.client.close()


def _vector_entry_point(
    num_envs: int = 1, url: str | Sequence[str] | None = None, **kwargs: Any
) -> RemoteVectorEnv:
    """What ``gymnasium.make_vec(ENV_ID, num_envs, url=..., ...)`` calls (its kwargs are make's)."""
    if url is None:
        raise ValueError(
            f"gymnasium.make_vec({ENV_ID!r}) needs url= (one server URL or a list); to start "
            "local servers, run `openenv-ws serve` and pass its URL"
        )
    if "max_episode_steps" in kwargs:
        raise ValueError(
            "max_episode_steps is a session setting here: pass config={'max_episode_steps': N} "
            "(the server ends episodes with truncated=True)"
        )
    return RemoteVectorEnv(url, num_envs, **kwargs)


def _is_rgb(spec: DiscreteSpec | ArraySpec) -> bool:
    return (
        isinstance(spec, ArraySpec)
        and len(spec.shape) == 3
        and spec.shape[-1] == 3
        and spec.dtype == "uint8"
    )


if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        id=ENV_ID,
        entry_point="openenv_ws.gym:RemoteEnv",
        vector_entry_point="openenv_ws.gym:_vector_entry_point",
        disable_env_checker=True,
    )
