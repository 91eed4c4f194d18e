"""Gymnasium adapters: remote sessions as ``gymnasium.Env`` and ``gymnasium.vector.VectorEnv``.

Existing RL code runs unchanged against a server::

    from openenv_ws.gym import RemoteEnv, RemoteVectorEnv

    env = RemoteEnv("ws://127.0.0.1:8000", config={"game": "pong", "frameskip": 1})
    env = gymnasium.make("openenv_ws/Remote-v0", url="ws://...", config={...})  # the same
    env = gymnasium.wrappers.AtariPreprocessing(env)      # needs frameskip=1 on the server
    # or the server preprocesses: config={"game": "pong", "obs_type": "grayscale",
    #   "img_height": 84, "img_width": 84, "stack_num": 4, "noop_max": 30, ...}

    envs = RemoteVectorEnv("ws://127.0.0.1:8000", 16, config={"game": "pong"})
    envs = gymnasium.make_vec("openenv_ws/Remote-v0", 16, url="ws://...", config={...})  # the same
    obs, infos = envs.reset(seed=0)

A vector env is one vector session: the server steps its envs together
(Atari: on ale-py's threaded ``AtariVectorEnv``) and answers with one batch.
``session="per_env"`` opens one session per env instead (for several
servers, per-env configs or ``autoreset_mode="disabled"``). An environment
whose observations are not one array (a Dict, a Tuple, ...) has no vector
session (SPEC section 22): by default (``session="auto"``) its envs get one
session each, their observations stacked as ``gymnasium.vector`` stacks them.

The id exists once this module is imported. Gymnasium 1.x loads no plugin
entry points, so without an import spell it ``"openenv_ws.gym:openenv_ws/Remote-v0"``:
Gymnasium imports the module before looking the id up.

Spaces come from the session spec, as the Gymnasium spaces they describe
(:mod:`openenv_ws.gymspaces`): an array spec is a ``Box`` with its shape,
dtype and bounds, a discrete spec a ``Discrete`` with its start, a dict spec a
``Dict`` (the same keys in the same order), a tuple spec a ``Tuple``, and so on.
Observations come back as Gymnasium gives them (a Tuple's value a tuple, a
Dict's a dict), and actions go as the space takes them.
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
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .client import VectorEnvClient, VectorSessionClient
from .client._batch import mask_infos
from .client.sync import EnvClient
from .environment import EnvSpec
from .errors import EnvConfigError, InvalidState, OpenEnvError, RemoteEnvError
from .gymspaces import gym_space, to_gym, to_wire
from .spaces import ArraySpec, DiscreteSpec, Space

#: What a vector env's ``step`` and ``recv`` return: observations, rewards,
#: terminations, truncations (one row per env) and the infos.
BatchStep = tuple[
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    np.ndarray[Any, Any],
    dict[str, Any],
]

__all__ = [
    "ENV_ID",
    "SESSIONS",
    "RemoteEnv",
    "RemoteVectorEnv",
    "client_seed",
    "is_rgb",
    "open_vector_client",
    "space_from_spec",
]

_NOT_RGB = (
    "render_mode='rgb_array' needs RGB image observations or frames in the info (a Gymnasium "
    "session opened with config 'render': true); this session sends {}"
)

_NOT_RGB_VECTOR = (
    "render_mode='rgb_array' in a vector env shows each env's last observation, so it needs "
    "RGB image observations (H, W, 3) uint8; this session sends {}: leave render_mode out, "
    "or render one env with RemoteEnv(..., render_mode='rgb_array')"
)

#: The info key of a result's frame in a session that renders (the Gymnasium plugin's).
_FRAME = "render"

#: How a vector env reaches its envs: ``"vector"``, one vector session on one server
#: (SPEC section 21), ``"per_env"``, one session per env, or ``"auto"``: one vector
#: session, or one session per env for an environment whose observations a vector
#: session cannot carry (not one array, SPEC section 22).
SESSIONS = ("auto", "vector", "per_env")

#: Registered Gymnasium id: ``gymnasium.make(ENV_ID, url=..., config=...)`` makes a :class:`RemoteEnv`.
ENV_ID = "openenv_ws/Remote-v0"


#: The Gymnasium space of a session's action or observation spec (a dict stays a ``Dict``).
space_from_spec = gym_space


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


class RemoteEnv(gymnasium.Env[Any, Any]):
    """One remote session as a ``gymnasium.Env``.

    Args:
        url: the server (None: start a local server subprocess, stopped on close).
        config: the session's environment configuration.
        render_mode: None or ``"rgb_array"``: the last observation for RGB
            image observations, else the last result's frame for a Gymnasium
            session whose config has ``"render": true``.
        **client_kwargs: passed to :class:`~openenv_ws.client.EnvClient`
            (``token``, ``timeout``, ...).

    Array observations (also inside a Dict or Tuple) are the arrays the server
    sent (read-only); copy one before changing it in place.
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
        check_config(config)
        self.render_mode = render_mode
        if url is None:
            self.client: EnvClient[Any] = _local_client(config, client_kwargs)
        else:
            self.client = EnvClient(url, config=config, **client_kwargs)
        spec: EnvSpec = self.client.spec
        self.spec_extra: Mapping[str, Any] = spec.extra
        self._spec = spec
        self.action_space = gym_space(spec.action)
        self.observation_space = gym_space(spec.observation)
        rgb = is_rgb(spec.observation)
        self._frames = not rgb and (config or {}).get(_FRAME) is True
        self.metadata = {
            **self.metadata,
            "render_modes": ["rgb_array"] if rgb or self._frames else [],
        }
        if render_mode is not None and not (rgb or self._frames):
            self.client.close()
            raise EnvConfigError(_NOT_RGB.format(spec.observation))
        self._last_obs: Any = None
        self._last_info: dict[str, Any] = {}
        if spec.extra.get("env") == "atari":
            # Read by Gymnasium's AtariPreprocessing (it refuses frame skipping on both sides).
            self._frameskip = spec.extra.get("config", {}).get("frameskip")
            self.ale = _Screen(self)

    @property
    def spec(self) -> gymnasium.envs.registration.EnvSpec | None:
        """What ``gymnasium.make`` recorded, with ``max_episode_steps`` the session's own
        (the server truncates episodes there)."""
        return self.__dict__.get("_gym_spec")

    @spec.setter
    def spec(self, value: gymnasium.envs.registration.EnvSpec | None) -> None:
        steps = _max_episode_steps(self.__dict__.get("_spec"))
        if value is not None and value.max_episode_steps is None and steps is not None:
            value = copy.copy(value)
            value.max_episode_steps = steps
        self.__dict__["_gym_spec"] = value

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode; a seed makes it reproducible (and seeds ``np_random``)."""
        super().reset(seed=seed)
        result = self.client.reset(seed=seed, options=options)
        seeds = result.info.get("seeds")
        if seed is not None and isinstance(seeds, list) and seeds:
            # An environment that derives its own seeds from `seed` (Atari, like ale-py)
            # reports them; the first seeds np_random as ale-py's env seeds its own.
            self._np_random, _ = seeding.np_random(int(seeds[0]))
        obs = self._observation(result.observation)
        self._last_obs, self._last_info = obs, result.info
        return obs, result.info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """One step; returns ``(obs, reward, terminated, truncated, info)``."""
        if type(action) is not int:  # an int is its own wire value
            action = to_wire(self._spec.action, action)
        result = self.client.step(action)
        obs = self._observation(result.observation)
        self._last_obs, self._last_info = obs, result.info
        return obs, result.reward, result.terminated, result.truncated, result.info

    def _observation(self, value: Any) -> Any:
        space = self._spec.observation
        return value if isinstance(space, ArraySpec) else to_gym(space, value)

    def render(self) -> np.ndarray[Any, Any] | None:
        """With ``render_mode="rgb_array"``: the last observation of an RGB session, or
        the last result's frame of a session that renders (``"render": true``)."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        if self._frames:
            frame = self._last_info.get(_FRAME)
            return None if frame is None else np.array(frame)
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
    """Remote envs as a ``gymnasium.vector.VectorEnv``: one vector session, or one session per env.

    Args:
        urls: the server's URL (several only with ``session="per_env"``: env
            ``i`` uses ``urls[i % len(urls)]``).
        num_envs: number of envs (default: one per URL).
        config: the configuration of every env (or, with ``session="per_env"``,
            ``configs``, one per env).
        autoreset_mode: a ``gymnasium.vector.AutoresetMode`` or its value
            (``"next_step"``, the default; ``"same_step"``; with
            ``session="per_env"`` also ``"disabled"``, then reset ended envs
            with ``reset(options={"reset_mask": mask})``).
        session: ``"auto"`` (default): ``"vector"``, or ``"per_env"`` when the
            server refuses a vector session and the envs' observations are
            structured (a Dict, a Tuple, ...: vector sessions carry arrays only);
            ``"vector"``: one vector session steps all envs on
            the server (:class:`~openenv_ws.client.VectorSessionClient`;
            Atari: ale-py's threaded vector engine); ``"per_env"``: one session
            per env (:class:`~openenv_ws.client.VectorEnvClient`).
        render_mode: None or ``"rgb_array"`` (each env's last observation, for
            RGB image observations).
        batch_size: envs per batch (vector sessions; default ``num_envs``). With
            fewer, EnvPool's asynchronous mode: :meth:`reset` returns the first
            ``batch_size`` envs ready, :meth:`send` acts on a batch and
            :meth:`recv` returns the next; :meth:`step` is ``send`` + ``recv``.
            The batched spaces have ``batch_size`` rows, as every result has.
        **client_kwargs: passed to the client (``token``, ``timeout``,
            ``busy_poll``, ``copy``, ...).

    ``infos["env_id"]`` names the env of each row (as EnvPool's), with EnvPool's
    other Atari keys: ``lives``, and under ``reward_clipping``/``episodic_life``
    ``reward`` (raw) and ``terminated`` (the real game over).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        num_envs: int | None = None,
        *,
        config: Mapping[str, Any] | None = None,
        configs: Sequence[Mapping[str, Any]] | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        session: str = "auto",
        render_mode: str | None = None,
        batch_size: int | None = None,
        **client_kwargs: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if batch_size is not None:
            if session == "per_env":
                raise ValueError(
                    "batch_size is for vector sessions (session='vector' or 'auto'); with "
                    "session='per_env' use client.send()/client.recv(min_envs=...)"
                )
            client_kwargs["batch_size"] = batch_size
            session = "vector"
        check_config(config)
        self.client = open_vector_client(
            urls,
            num_envs,
            session=session,
            config=config,
            configs=configs,
            autoreset_mode=autoreset_mode,
            **client_kwargs,
        )
        self.num_envs = self.client.num_envs
        #: Envs per result: ``num_envs``, or fewer in an asynchronous session.
        self.batch_size: int = getattr(self.client, "batch_size", self.num_envs)
        spec = self.client.spec
        rgb = is_rgb(spec.observation)
        mode = AutoresetMode[self.client.autoreset_mode.upper()]  # (the clients' names)
        self.metadata = {"render_modes": ["rgb_array"] if rgb else [], "autoreset_mode": mode}
        self.render_mode = render_mode
        if render_mode is not None and not rgb:
            self.client.close()
            raise EnvConfigError(_NOT_RGB_VECTOR.format(spec.observation))
        self._last_obs: np.ndarray[Any, Any] | None = None
        self.single_action_space = gym_space(spec.action)
        self.single_observation_space = gym_space(spec.observation)
        self.action_space = batch_space(self.single_action_space, self.batch_size)
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        # What gymnasium.make_vec(ENV_ID, ...) records (it sets its own when it makes the env);
        # gymnasium.make_vec(envs.spec) makes the same sessions again. The token stays out.
        self.spec = copy.copy(gymnasium.spec(ENV_ID))
        given = {"config": config, "configs": configs, "render_mode": render_mode}
        self.spec.kwargs = {
            "url": urls,
            **{k: v for k, v in given.items() if v is not None},
            "autoreset_mode": mode.value,
            "session": session,
            **{k: v for k, v in client_kwargs.items() if k != "token"},
            "num_envs": self.num_envs,
            "vectorization_mode": "vector_entry_point",
        }
        if batch_size is not None:
            self.spec.kwargs["batch_size"] = batch_size

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
        seeds = client_seed(self.client, seed)  # a list only for one session per env
        if env_ids is not None and isinstance(seeds, list) and len(seeds) == self.num_envs:
            seeds = [seeds[i] for i in env_ids]
        obs, infos = self.client.reset(seed=seeds, options=rest, env_ids=env_ids)
        if isinstance(self.client, VectorSessionClient):
            # Every row of the batch, as untouched envs are; Gymnasium's infos are the reset's.
            reset = None if env_ids is None else np.isin(np.arange(self.num_envs), env_ids)
            infos = mask_infos(infos, len(obs), reset)
        self._last_obs = obs
        return obs, infos

    def step(self, actions: np.ndarray[Any, Any]) -> BatchStep:
        """Step every env; the result arrays have one row per env.

        In same-step autoreset mode ``infos["final_obs"]`` is an object array
        (None for envs that did not end) and ``infos["final_info"]`` a dict of
        arrays with ``_key`` masks, as Gymnasium's own vector envs give them.

        Raises:
            ValueError: ``actions`` does not have shape ``(num_envs, ...)``.
        """
        if self.batch_size < self.num_envs:
            self.send(actions)
            return self.recv()
        obs, rewards, terminations, truncations, infos = self.client.step(actions)
        if isinstance(self.client, VectorSessionClient):
            infos = mask_infos(infos, self.num_envs)
        self._last_obs = obs
        return obs, rewards, terminations, truncations, infos

    def send(
        self, actions: np.ndarray[Any, Any], env_id: np.ndarray[Any, Any] | None = None
    ) -> None:
        """EnvPool's ``send``: act on the envs of the last result (``infos["env_id"]``,
        or `env_id`, the same envs in any order) and return at once.

        Raises:
            InvalidState: a send already awaits its :meth:`recv`.
            ValueError: `actions` or `env_id` do not fit the last result.
        """
        self.client.send(actions, env_id)

    def recv(
        self,
    ) -> BatchStep:
        """EnvPool's ``recv``: the next ``batch_size`` results, ``infos["env_id"]`` naming
        their envs.

        Raises:
            InvalidState: no :meth:`send` is pending.
        """
        if isinstance(self.client, VectorSessionClient):
            obs, rewards, terminations, truncations, infos = self.client.recv()
            infos = mask_infos(infos, len(obs))
        else:
            batch = self.batch_size
            obs, rewards, terminations, truncations, infos = self.client.recv(
                min_envs=batch, max_envs=batch
            )
        self._last_obs = obs
        return obs, rewards, terminations, truncations, infos

    def render(self) -> tuple[np.ndarray[Any, Any], ...] | None:
        """The last observation of each env when ``render_mode="rgb_array"`` (RGB sessions)."""
        if self.render_mode != "rgb_array" or self._last_obs is None:
            return None
        return tuple(np.array(frame) for frame in self._last_obs)

    def close_extras(self, **kwargs: Any) -> None:
        self.client.close()


def open_vector_client(
    urls: str | Sequence[str],
    num_envs: int | None = None,
    *,
    session: str = "vector",
    config: Mapping[str, Any] | None = None,
    configs: Sequence[Mapping[str, Any]] | None = None,
    autoreset_mode: Any = "next_step",
    **client_kwargs: Any,
) -> VectorSessionClient | VectorEnvClient:
    """The client of a vector env: one vector session, or one session per env.

    Args:
        session: one of :data:`SESSIONS`; the other arguments are those of
            :class:`RemoteVectorEnv`.

    Raises:
        ValueError: an unknown `session`, or what one vector session cannot
            be (on several servers, with per-env configs, without autoreset).
    """
    if session == "auto":
        try:
            return open_vector_client(
                urls,
                num_envs,
                session="vector",
                config=config,
                configs=configs,
                autoreset_mode=autoreset_mode,
                **client_kwargs,
            )
        except RemoteEnvError as refused:
            if refused.code != "bad_config":
                raise
            kwargs = {"config": config, "autoreset_mode": autoreset_mode, **client_kwargs}
            return _structured_sessions(refused, urls, num_envs, kwargs)
    if session == "per_env":
        return VectorEnvClient(
            urls,
            num_envs,
            config=config,
            configs=configs,
            autoreset_mode=autoreset_mode,
            **client_kwargs,
        )
    if session != "vector":
        raise ValueError(
            f"session must be one of {', '.join(map(repr, SESSIONS))}, got {session!r}"
        )
    url_list = [urls] if isinstance(urls, str) else list(urls)
    mode = str(getattr(autoreset_mode, "value", autoreset_mode)).lower()
    why = (
        f"{len(url_list)} URLs were given"
        if len(url_list) != 1
        else "per-env configs were given"
        if configs is not None
        else "autoreset_mode='disabled' was asked for"
        if mode == "disabled"
        else None
    )
    if why is not None:
        raise ValueError(
            f"one vector session lives on one server, with one config and autoreset; {why}: "
            "pass session='per_env' for one session per env"
        )
    n = 1 if num_envs is None else num_envs
    return VectorSessionClient(
        url_list[0], n, config=config, autoreset_mode=autoreset_mode, **client_kwargs
    )


def _structured_sessions(
    refused: RemoteEnvError,
    urls: str | Sequence[str],
    num_envs: int | None,
    kwargs: dict[str, Any],
) -> VectorEnvClient:
    """One session per env after the server refused a vector session, when the envs'
    observations are what a vector session cannot carry (not one array); otherwise
    the refusal stands."""
    try:
        client = VectorEnvClient(urls, num_envs, **kwargs)
    except (OpenEnvError, TypeError, ValueError):  # (TypeError: an option of vector sessions)
        raise refused from None
    if isinstance(client.spec.observation, ArraySpec):
        client.close()
        raise refused
    return client


def client_seed(
    client: VectorSessionClient | VectorEnvClient, seed: int | Sequence[int | None] | None
) -> Any:
    """`seed` as `client`'s ``reset`` takes it: a vector session takes one int
    (env ``i`` gets ``seed + i``), so one seed per env must be of that form.

    Raises:
        ValueError: per-env seeds a vector session cannot take.
    """
    if seed is None or isinstance(seed, int | np.integer) or isinstance(client, VectorEnvClient):
        return seed
    seeds = list(seed)
    first = seeds[0] if seeds else None
    if all(s is None for s in seeds):
        return None
    if first is not None and seeds == [first + i for i in range(len(seeds))]:
        return first
    raise ValueError(
        f"a vector session seeds env i with seed + i, and the seeds {seeds} are not of "
        "that form; pass one int, or session='per_env' for seeds of your own"
    )


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


def _max_episode_steps(spec: EnvSpec | None) -> int | None:
    """Where the server truncates a session's episodes, if known: an Atari config's
    ``max_episode_steps``, or a Gymnasium id's (its ``kwargs``, else its registration)."""
    if spec is None:
        return None
    extra = spec.extra
    config = extra.get("config")
    steps = config.get("max_episode_steps") if isinstance(config, Mapping) else None
    gym_id = extra.get("id")
    if steps is None and isinstance(gym_id, str):
        kwargs = extra.get("kwargs")
        steps = kwargs.get("max_episode_steps") if isinstance(kwargs, Mapping) else None
        if steps is None and gym_id in gymnasium.registry:
            steps = gymnasium.registry[gym_id].max_episode_steps
    return steps if type(steps) is int else None


def check_config(config: Any) -> None:
    """Refuse a config that is not a mapping (``config="CartPole-v1"``) with a clear error.

    Raises:
        EnvConfigError: `config` is neither None nor a mapping.
    """
    if config is not None and not isinstance(config, Mapping):
        example = f"{{'id': {config!r}}}" if isinstance(config, str) else "{'game': 'pong'}"
        raise EnvConfigError(
            f"config must be a mapping of options such as {example}, got {type(config).__name__}"
        )


def _local_client(config: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> EnvClient[Any]:
    """A session on a local server started for it: Atari, or Gymnasium's for a config
    with a Gymnasium ``id`` (that id allowed)."""
    from .providers.local import LocalServerProvider

    gym_id = (config or {}).get("id")
    args = ["--env", "gymnasium", "--gym-ids", gym_id] if isinstance(gym_id, str) else []
    provider = LocalServerProvider(args=args).start()
    try:
        client: EnvClient[Any] = EnvClient(provider.url, config=config, **kwargs)
    except BaseException:
        provider.stop()
        raise
    client._provider = provider
    return client


def is_rgb(spec: Space) -> bool:
    """Whether a spec is of RGB images, ``(H, W, 3)`` uint8 (what ``render()`` can show)."""
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
