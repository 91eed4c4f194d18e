"""EnvPool-compatible construction: ``envpool.make`` for Atari tasks, served by openenv-ws.

Code written for EnvPool runs with its import line changed::

    import openenv_ws.envpool as envpool

    envs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=8, episodic_life=True,
                        reward_clip=True)                  # a local server is started
    envs = envpool.make("Breakout-v5", "gymnasium", num_envs=8, url="ws://host:8000")
    obs, info = envs.reset()                               # obs: (8, 4, 84, 84) uint8
    obs, reward, terminated, truncated, info = envs.step(actions)

EnvPool's Atari option names and defaults are taken (:data:`DEFAULTS`: 84x84
grayscale, stack 4, frame skip 4 with max-pooling, up to 30 NOOPs, FIRE on
reset, no sticky actions, 27,000 steps a game), and the returned
:class:`EnvPoolEnv` is, as EnvPool's object is, both a ``gymnasium.Env`` (so
``gymnasium.Wrapper`` subclasses wrap it) and a ``gymnasium.vector.VectorEnv``;
``observation_space`` and ``action_space`` are one env's, as EnvPool's are.
It has EnvPool's ``send``/``recv``/``async_reset`` (``batch_size`` <
``num_envs``: asynchronous) and EnvPool's info keys: ``env_id``, ``lives``,
``reward`` (unclipped), ``terminated`` (the real game over, also under
``episodic_life``), ``elapsed_step`` (steps since the game began) and
``players``. The envs run in one vector session (ale-py's threaded engine on
the server).

Differences from EnvPool: ``max_episode_steps`` truncates at
``max_episode_steps * frame_skip`` emulator frames (one vector session limits
games by frames); ``mode``/``difficulty`` other than the game's default,
``zero_discount_on_life_loss`` and ``use_inter_area_resize=False`` are
refused; the NOOPs of a reset are played at a new game only (EnvPool plays
them after a lost life too); ``seed`` seeds the first reset (env ``i`` gets
``seed + i``), later resets run on.

Requires ``gymnasium``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

from .client import VectorSessionClient
from .client.options import BlockingOptions
from .errors import EnvConfigError
from .gym import BatchStep, RemoteVectorEnv

__all__ = ["DEFAULTS", "EnvPoolEnv", "make", "make_gymnasium", "to_config"]

#: EnvPool 1.2.5's Atari options and defaults (``envpool.make_spec("Pong-v5").config``)
#: that change what the envs do.
DEFAULTS: Mapping[str, Any] = {
    "max_episode_steps": 27_000,
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}
# EnvPool options about threads, players and returns that change nothing here.
_IGNORED = frozenset(
    {"thread_affinity_offset", "max_num_players", "base_path", "gym_reset_return_info"}
)
# Options only the defaults are supported for, and why.
_ONLY_DEFAULT = {
    "mode": "a vector session plays each game's default mode",
    "difficulty": "a vector session plays each game's default difficulty",
    "zero_discount_on_life_loss": "it has no equivalent here",
    "use_inter_area_resize": "frames are resized with OpenCV's INTER_AREA",
}
_TASK = re.compile(r"^([A-Za-z0-9]+)-v5$")
# Arguments of the vector session's client that make() sets itself (the others pass through).
_NOT_CLIENT_KEYS = frozenset({"url", "num_envs", "config", "batch_size", "autoreset_mode"})


def to_config(task_id: str, **options: Any) -> dict[str, Any]:
    """The session config of an EnvPool Atari task and options (EnvPool's names).

    Raises:
        EnvConfigError: a task that is not an Atari ``-v5`` task, an unknown
            option (the message lists EnvPool's), or an unsupported value.
    """
    match = _TASK.match(task_id) if isinstance(task_id, str) else None
    if match is None:
        raise EnvConfigError(
            f"task_id must be an EnvPool Atari task such as 'Pong-v5' or 'Breakout-v5', "
            f"got {task_id!r}"
        )
    unknown = sorted(set(options) - set(DEFAULTS) - _IGNORED)
    if unknown:
        raise EnvConfigError(
            f"unknown EnvPool option(s) {unknown}; the Atari options are "
            f"{', '.join(sorted(DEFAULTS))} (and num_threads, seed)"
        )
    opts = {**DEFAULTS, **{k: v for k, v in options.items() if k not in _IGNORED}}
    for key, why in _ONLY_DEFAULT.items():
        if opts[key] != DEFAULTS[key]:
            raise EnvConfigError(
                f"option {key!r} must be {DEFAULTS[key]!r} here ({why}), got {opts[key]!r}"
            )
    steps = opts["max_episode_steps"]
    if type(steps) is not int or steps < 1:
        raise EnvConfigError(f"option 'max_episode_steps' must be a positive int, got {steps!r}")
    return {
        "game": re.sub(r"(?<!^)(?=[A-Z])", "_", match.group(1)).lower(),
        "obs_type": "grayscale" if opts["gray_scale"] else "rgb",
        "frameskip": opts["frame_skip"],
        "repeat_action_probability": opts["repeat_action_probability"],
        "full_action_space": opts["full_action_space"],
        "max_num_frames_per_episode": steps * opts["frame_skip"],
        "img_height": opts["img_height"],
        "img_width": opts["img_width"],
        "stack_num": opts["stack_num"],
        "maxpool": True,
        "noop_max": opts["noop_max"],
        "episodic_life": opts["episodic_life"],
        "reward_clipping": opts["reward_clip"],
        "use_fire_reset": opts["use_fire_reset"],
    }


class EnvPoolEnv(RemoteVectorEnv, gymnasium.Env):  # type: ignore[misc]
    """EnvPool's Gymnasium env pool, served by openenv-ws (made by :func:`make`).

    ``observation_space``/``action_space`` are one env's (EnvPool's), equal to
    ``single_observation_space``/``single_action_space``. Results are EnvPool's:
    rewards float32, ``info`` with ``env_id``, ``lives``, ``reward``,
    ``terminated``, ``elapsed_step``, ``players``.
    """

    def __init__(
        self,
        url: str,
        num_envs: int,
        batch_size: int,
        config: Mapping[str, Any],
        *,
        seed: int = 42,
        num_threads: int = 0,
        **client_kwargs: Any,
    ) -> None:
        config = {**config, "num_threads": num_threads}
        super().__init__(
            url,
            num_envs,
            config=config,
            batch_size=batch_size if batch_size < num_envs else None,
            session="vector",
            **client_kwargs,
        )
        self.observation_space = self.single_observation_space
        self.action_space = self.single_action_space
        self.is_vector_env = True
        self.is_async = self.batch_size < self.num_envs
        self.all_env_ids = np.arange(num_envs, dtype=np.int32)
        self._seed: int | None = seed
        self._elapsed = np.zeros(num_envs, np.int32)
        # Per env: 0 playing, 1 its episode ended at a lost life, 2 its game ended.
        self._ended = np.zeros(num_envs, np.int8)
        self._provider: Any = None
        self._held: tuple[Any, ...] | None = None

    # ------------------------------------------------------------------ EnvPool API

    def reset(  # type: ignore[override]
        self,
        env_id: np.ndarray[Any, Any] | None = None,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray[Any, Any], dict[str, Any]]:
        """Reset the envs (all, or `env_id` in a synchronous pool); the first reset is
        seeded with ``seed`` (env ``i``: ``seed + i``)."""
        if seed is None:
            seed, self._seed = self._seed, None
        opts = dict(options or {})
        if env_id is not None:
            mask = np.zeros(self.num_envs, np.bool_)
            mask[np.asarray(env_id)] = True
            opts["reset_mask"] = mask
        obs, info = super().reset(seed=seed, options=opts or None)
        which = slice(None) if env_id is None else np.asarray(env_id)
        self._elapsed[which] = 0
        self._ended[which] = 0
        zeros = np.zeros(len(obs), np.bool_)
        return obs, self._envpool_info(info, np.zeros(len(obs)), zeros, len(obs))

    def async_reset(self) -> None:
        """EnvPool's ``async_reset``: reset every env; :meth:`recv` returns the first batch."""
        obs, info = self.reset()
        self._held = (
            obs,
            np.zeros(len(obs), np.float32),
            np.zeros(len(obs), np.bool_),
            np.zeros(len(obs), np.bool_),
            info,
        )

    def step(  # type: ignore[override]
        self, action: np.ndarray[Any, Any], env_id: np.ndarray[Any, Any] | None = None
    ) -> BatchStep:
        """``send`` then ``recv`` (synchronous pools: every env, in env order)."""
        if self.is_async or env_id is not None:
            self.send(action, env_id)
            return self.recv()
        return self._envpool(*super().step(np.asarray(action)))

    def send(
        self, actions: np.ndarray[Any, Any], env_id: np.ndarray[Any, Any] | None = None
    ) -> None:
        """Act on the envs of the last batch (or `env_id`, the same envs in any order)."""
        self._held = None
        super().send(np.asarray(actions), env_id)

    def recv(
        self,
    ) -> BatchStep:
        """The next batch (after :meth:`async_reset`, its first)."""
        held = self._held
        if held is not None:
            self._held = None
            return held
        return self._envpool(*super().recv())

    # ------------------------------------------------------------------ results

    def _envpool(
        self,
        obs: np.ndarray[Any, Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        info: dict[str, Any],
    ) -> BatchStep:
        ids = np.asarray(info["env_id"]) if "env_id" in info else self.all_env_ids
        ended = self._ended[ids]
        # A row after a game's end is its reset (elapsed 0); after a lost life the game goes on.
        self._elapsed[ids] = np.where(ended == 2, 0, self._elapsed[ids] + (ended == 0))
        info = self._envpool_info(info, reward, terminated, len(obs))
        game_over = info["terminated"].astype(np.bool_) | truncated
        self._ended[ids] = np.where(game_over, 2, np.where(terminated, 1, 0))
        return obs, reward.astype(np.float32), terminated, truncated, info

    def _envpool_info(
        self,
        info: dict[str, Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        rows: int,
    ) -> dict[str, Any]:
        ids = np.asarray(info.get("env_id", self.all_env_ids[:rows]), np.int32)
        out = {k: v for k, v in info.items() if not k.startswith("_")}
        out["env_id"] = ids
        out["players"] = {"env_id": ids}
        out["lives"] = np.asarray(info.get("lives", np.zeros(rows)), np.int32)
        out["reward"] = np.asarray(info.get("reward", reward), np.float32)
        # Without episodic_life an episode is a game.
        out["terminated"] = np.asarray(info.get("terminated", terminated), np.int32)
        out["elapsed_step"] = self._elapsed[ids].copy()
        return out

    def close_extras(self, **kwargs: Any) -> None:
        try:
            super().close_extras(**kwargs)
        finally:
            provider, self._provider = self._provider, None
            if provider is not None:
                provider.stop()


def make(
    task_id: str,
    env_type: str = "gymnasium",
    *,
    num_envs: int = 1,
    batch_size: int | None = None,
    num_threads: int = 0,
    seed: int = 42,
    url: str | None = None,
    **kwargs: Any,
) -> EnvPoolEnv:
    """EnvPool's ``envpool.make`` for Atari tasks, with ``env_type="gymnasium"``.

    Args:
        task_id: an EnvPool Atari task, e.g. ``"Breakout-v5"``.
        env_type: ``"gymnasium"``; ``"gym"`` gives the same, as EnvPool 1.2.5 does
            where the ``gym`` package is not installed (CleanRL's scripts ask for it);
            ``"dm"`` is not offered.
        num_envs, batch_size, num_threads, seed: EnvPool's.
        url: the server; None starts a local server subprocess, stopped on close.
        **kwargs: EnvPool's Atari options (:data:`DEFAULTS`), and client
            keywords (``token``, ``timeout``, ...).

    Raises:
        EnvConfigError: see :func:`to_config`; an `env_type` other than ``"gymnasium"``.
    """
    if env_type not in ("gymnasium", "gym"):
        raise EnvConfigError(
            f"env_type {env_type!r} is not offered; use env_type='gymnasium' (the "
            "(obs, reward, terminated, truncated, info) API)"
        )
    named = inspect.signature(VectorSessionClient).parameters.values()
    client = {p.name for p in named if p.kind is not p.VAR_KEYWORD}
    client = (client | BlockingOptions.__optional_keys__) - _NOT_CLIENT_KEYS
    options = {k: kwargs.pop(k) for k in list(kwargs) if k not in client}
    config = to_config(task_id, **options)  # an unknown option is named with EnvPool's
    provider = None
    if url is None:
        from .providers.local import LocalServerProvider

        provider = LocalServerProvider().start()
        url = provider.url
    try:
        env = EnvPoolEnv(
            url,
            num_envs,
            num_envs if batch_size is None else batch_size,
            config,
            seed=seed,
            num_threads=num_threads,
            **kwargs,
        )
    except BaseException:
        if provider is not None:
            provider.stop()
        raise
    env._provider = provider
    return env


#: EnvPool's name for the Gymnasium flavour of :func:`make`.
def make_gymnasium(task_id: str, **kwargs: Any) -> EnvPoolEnv:
    """``make(task_id, "gymnasium", **kwargs)``, as ``envpool.make_gymnasium``."""
    return make(task_id, "gymnasium", **kwargs)
