"""Atari vector sessions on ale-py's threaded vector engine (``AtariVectorEnv``, SPEC section 21).

One :class:`AtariVectorEnvironment` steps the ``num_envs`` envs of a vector
session in C++ threads, the GIL released. Its config is an Atari session's
(:func:`~atari.config.normalize_config`) plus the two options of vector
sessions, ``autoreset_mode`` and ``num_threads``; what the engine cannot do
(RAM observations, a frameskip pair, a mode, a difficulty, a step limit) is
refused naming the option. Every engine option is passed explicitly:
``AtariVectorEnv``'s own defaults (84x84 grayscale, stack 4, ...) are not this
project's (no preprocessing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ale_py
import numpy as np
from ale_py.vector_env import AtariVectorEnv

from openenv_ws.brief import brief
from openenv_ws.environment import (
    AUTORESET_MODES,
    ArraySpec,
    BatchResult,
    DiscreteSpec,
    EnvSpec,
    VectorEnvironment,
    check_batch_obs,
)
from openenv_ws.errors import EnvConfigError, ProtocolError

from .config import normalize_config

__all__ = ["MAX_SEED", "MAX_THREADS", "VECTOR_KEYS", "AtariVectorEnvironment", "vector_kwargs"]

#: The options of vector sessions only (refused in a single session).
VECTOR_KEYS = ("autoreset_mode", "num_threads")
#: Largest ``num_threads`` (0: the engine's default, one per core).
MAX_THREADS = 64
#: Largest seed of an env: the engine's seeds are 32-bit signed integers.
MAX_SEED = 2**31 - 1
# AtariVectorEnv's names of the autoreset modes.
_ENGINE_MODES = {"next_step": "NextStep", "same_step": "SameStep"}
# Options a vector session cannot have, and why.
_NOT_IN_VECTOR = {
    "mode": "the vector engine plays each game's default mode",
    "difficulty": "the vector engine plays each game's default difficulty",
    "max_episode_steps": "the vector engine limits episodes by max_num_frames_per_episode only",
}
_ACTION_NAMES: dict[Any, str] = {a: name for name, a in ale_py.Action.__members__.items()}
_NATIVE = (210, 160)


def vector_kwargs(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The effective config of a vector session and ``AtariVectorEnv``'s keyword arguments
    for it (all but ``num_envs`` and ``batch_size``).

    Raises:
        EnvConfigError: a bad option, or one the vector engine cannot honour.
    """
    config = dict(config)
    mode = config.pop("autoreset_mode", "next_step")
    if type(mode) is not str or mode not in AUTORESET_MODES:
        raise EnvConfigError(
            f"option 'autoreset_mode' must be 'next_step' or 'same_step', got {brief(mode)}"
        )
    threads = config.pop("num_threads", 0)
    if type(threads) is not int or not 0 <= threads <= MAX_THREADS:
        raise EnvConfigError(
            f"option 'num_threads' must be an integer in 0..{MAX_THREADS} "
            f"(0: one thread per core), got {brief(threads)}"
        )
    cfg = normalize_config(config)
    if cfg["obs_type"] == "ram":
        raise EnvConfigError(
            "option 'obs_type': the vector engine observes the screen only; "
            "choose 'rgb' or 'grayscale', or open single sessions for 'ram'"
        )
    if type(cfg["frameskip"]) is not int:
        raise EnvConfigError(
            "option 'frameskip': the vector engine skips a fixed number of frames; "
            f"give an integer instead of the pair {cfg['frameskip']}"
        )
    for key, why in _NOT_IN_VECTOR.items():
        if cfg[key] is not None:
            raise EnvConfigError(f"option {key!r} must be null in a vector session: {why}")
    kwargs = {
        "game": cfg["game"],
        "num_threads": threads,
        "thread_affinity_offset": -1,
        "max_num_frames_per_episode": cfg["max_num_frames_per_episode"],
        "repeat_action_probability": cfg["repeat_action_probability"],
        "full_action_space": cfg["full_action_space"],
        "autoreset_mode": _ENGINE_MODES[mode],
        "img_height": cfg["img_height"] or _NATIVE[0],
        "img_width": cfg["img_width"] or _NATIVE[1],
        "grayscale": cfg["obs_type"] == "grayscale",
        "stack_num": cfg["stack_num"],
        "frameskip": cfg["frameskip"],
        "maxpool": cfg["maxpool"],
        "noop_max": cfg["noop_max"],
        "episodic_life": cfg["episodic_life"],
        "reward_clipping": cfg["reward_clipping"],
        "use_fire_reset": cfg["use_fire_reset"],
    }
    return {**cfg, "autoreset_mode": mode, "num_threads": threads}, kwargs


class AtariVectorEnvironment(VectorEnvironment):
    """The envs of an Atari vector session on ``AtariVectorEnv``.

    Observations have the shape of a single session of the same config
    (``stack_num`` 1: no stack axis); rewards are float64; the engine's
    ``info`` (``lives``, ``frame_number``, ``episode_frame_number``, and in
    same-step mode ``final_obs`` in batches where an env ended, zero in the rows
    of the envs that did not) is passed on.

    Args:
        config: the session's config (see :func:`vector_kwargs`).
        num_envs, batch_size: the session's.

    Raises:
        EnvConfigError: see :func:`vector_kwargs`.
    """

    #: A step is bounded (at most 64 frames per env, in C++ threads): served inline.
    inline = True

    def __init__(self, config: Mapping[str, Any], num_envs: int, batch_size: int) -> None:
        cfg, kwargs = vector_kwargs(config)
        self._config = cfg
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.autoreset_mode = cfg["autoreset_mode"]
        self._squeeze = cfg["stack_num"] == 1
        frame: tuple[int, ...] = (kwargs["img_height"], kwargs["img_width"])
        if not kwargs["grayscale"]:
            frame += (3,)
        shape = frame if self._squeeze else (cfg["stack_num"], *frame)
        check_batch_obs(num_envs, shape, 1)
        self._engine = AtariVectorEnv(num_envs=num_envs, batch_size=batch_size, **kwargs)
        self._paddles = np.ones(batch_size, np.float32)
        # Row of each env in the last batch (the order the engine applies actions in).
        self._rows = np.zeros(num_envs, np.intp)
        actions = list(self._engine.ale.get_action_set())
        self._spec = EnvSpec(
            action=DiscreteSpec(len(actions), tuple(_ACTION_NAMES[a] for a in actions)),
            observation=ArraySpec(shape, "uint8", 0, 255),
            extra={"env": "atari", "config": dict(cfg), "game": cfg["game"]},
        )

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def reset(
        self, *, seed: int | None = None, env_ids: np.ndarray[Any, Any] | None = None
    ) -> BatchResult:
        if seed is not None and seed + self.num_envs - 1 > MAX_SEED:
            raise ProtocolError(
                f"field 'seed' must be at most {MAX_SEED - self.num_envs + 1} in an Atari vector "
                f"session of {self.num_envs} envs (env i is seeded seed + i, a 32-bit integer), "
                f"got {seed}",
                code="bad_request",
            )
        options = None
        if env_ids is not None:
            mask = np.zeros(self.num_envs, np.bool_)
            mask[env_ids] = True
            options = {"reset_mask": mask}
        obs, info = self._engine.reset(seed=seed, options=options)
        rows = len(obs)
        flags = np.zeros(rows, np.bool_)
        return self._result(obs, np.zeros(rows), flags, flags.copy(), info)

    def send(self, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]) -> None:
        # The engine gives each action to the env in the same row of the last batch.
        in_rows = np.empty(self.batch_size, np.int64)
        in_rows[self._rows[env_ids]] = actions
        self._engine.ale.send(in_rows, self._paddles)

    def recv(self) -> BatchResult:
        obs, reward, terminated, truncated, info = self._engine.ale.recv()
        return self._result(obs, reward, terminated, truncated, info)

    def _result(
        self,
        obs: np.ndarray[Any, Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        info: dict[str, Any],
    ) -> BatchResult:
        env_id = info.pop("env_id")
        self._rows[env_id] = np.arange(len(env_id))
        final = info.get("final_obs")
        if final is not None:
            # The engine leaves the rows of envs that did not end undefined: zeros on the wire.
            final = final.copy()
            final[~(terminated | truncated)] = 0
            info["final_obs"] = final.squeeze(1) if self._squeeze else final
        if self._squeeze:
            obs = obs.squeeze(1)
        return BatchResult(
            obs,
            reward.astype(np.float64),
            terminated,
            truncated,
            env_id,
            info,
        )

    def state(self) -> dict[str, Any]:
        return {"config": dict(self._config), "game": self._config["game"]}

    def close(self) -> None:
        self._engine.close()
