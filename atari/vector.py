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

import collections
import contextlib
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
        # Both done here (AtariVectorEnvironment): the engine restarts the game at a lost
        # life and keeps no raw reward.
        "episodic_life": False,
        "reward_clipping": False,
        "use_fire_reset": cfg["use_fire_reset"],
    }
    return {**cfg, "autoreset_mode": mode, "num_threads": threads}, kwargs


class _Engine:
    """One synchronous ``AtariVectorEnv`` of a session: a block of consecutive env ids."""

    __slots__ = ("base", "engine", "lives", "lost", "paddles", "rows")

    def __init__(self, base: int, size: int, kwargs: Mapping[str, Any]) -> None:
        self.base = base
        self.engine = AtariVectorEnv(num_envs=size, batch_size=size, **kwargs)
        self.paddles = np.ones(size, np.float32)
        # Row of each env in the last batch (the order the engine applies actions in).
        self.rows = np.arange(size, dtype=np.intp)
        # episodic_life: each env's lives last seen, and whether its episode ended at a lost life.
        self.lives = np.zeros(size, np.int32)
        self.lost = np.zeros(size, np.bool_)


class AtariVectorEnvironment(VectorEnvironment):
    """The envs of an Atari vector session on ``AtariVectorEnv``.

    Observations have the shape of a single session of the same config
    (``stack_num`` 1: no stack axis); rewards are float64; the engine's
    ``info`` (``lives``, ``frame_number``, ``episode_frame_number``, and in
    same-step mode ``final_obs`` in batches where an env ended, zero in the rows
    of the envs that did not) is passed on.

    ``episodic_life`` ends an env's episode at a lost life and lets its game go
    on, as EnvPool does (the engine alone would start the game over):
    ``terminated`` is set and ``info["terminated"]`` is the real game over; the
    env's next step is its reset (next-step mode: reward 0, FIRE played instead
    of the action under ``use_fire_reset``). ``reward_clipping`` keeps the raw
    reward in ``info["reward"]``.

    A synchronous session is one engine of ``num_envs`` envs. An asynchronous
    one (``batch_size`` < ``num_envs``, which must divide it) is
    ``num_envs / batch_size`` synchronous engines of ``batch_size`` envs each,
    taken in turn: :meth:`send` starts a step of the engine whose batch was
    answered last (the engine runs it in its threads, the GIL released) and
    :meth:`recv` waits for the engine that has waited longest. While the
    client works on one batch, the other engines step. ale-py's own
    asynchronous mode is not used: in 0.12 it may never return an env's reset,
    which would lose that env for the whole session. Each env's episode is the
    same as in a synchronous session with the same seed and actions.

    Args:
        config: the session's config (see :func:`vector_kwargs`).
        num_envs, batch_size: the session's.

    Raises:
        EnvConfigError: see :func:`vector_kwargs`, or a ``batch_size`` that does
            not divide ``num_envs``.
    """

    #: A step is bounded (at most 64 frames per env, in C++ threads): served inline.
    inline = True

    def __init__(self, config: Mapping[str, Any], num_envs: int, batch_size: int) -> None:
        cfg, kwargs = vector_kwargs(config)
        if num_envs % batch_size:
            raise EnvConfigError(
                f"batch_size {batch_size} must divide num_envs {num_envs} in an Atari vector "
                "session (its envs step in blocks of batch_size, taken in turn)"
            )
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
        self._engines: list[_Engine] = []
        try:
            for base in range(0, num_envs, batch_size):
                self._engines.append(_Engine(base, batch_size, kwargs))
        except BaseException:
            self.close()
            raise
        # The engine whose batch was answered last (its actions come next), and the
        # others in the order their batches are due; a reset's batches wait in _held.
        self._current = self._engines[0]
        self._due: collections.deque[_Engine] = collections.deque()
        self._held: dict[int, BatchResult] = {}
        actions = list(self._current.engine.ale.get_action_set())
        self._episodic = bool(cfg["episodic_life"])
        self._clip = bool(cfg["reward_clipping"])
        fire = cfg["use_fire_reset"] and ale_py.Action.FIRE in actions
        self._fire = actions.index(ale_py.Action.FIRE) if fire else -1
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
        self._drain()
        options = None
        if env_ids is not None:  # synchronous sessions only: one engine
            mask = np.zeros(self.num_envs, np.bool_)
            mask[env_ids] = True
            options = {"reset_mask": mask}
        for unit in self._engines:
            obs, info = unit.engine.reset(
                seed=None if seed is None else seed + unit.base, options=options
            )
            rows = len(obs)
            flags = np.zeros(rows, np.bool_)
            self._held[unit.base] = self._result(
                unit, obs, np.zeros(rows), flags, flags.copy(), info
            )
        self._due.extend(self._engines)
        return self._next()

    def send(self, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]) -> None:
        unit = self._current
        # The engine gives each action to the env in the same row of its last batch.
        in_rows = np.empty(self.batch_size, np.int64)
        in_rows[unit.rows[env_ids - unit.base]] = actions
        if self._fire >= 0 and unit.lost.any():  # the reset after a lost life presses FIRE
            in_rows[unit.rows[np.flatnonzero(unit.lost)]] = self._fire
        unit.engine.ale.send(in_rows, unit.paddles)
        self._due.append(unit)

    def recv(self) -> BatchResult:
        return self._next()

    def _next(self) -> BatchResult:
        unit = self._current = self._due.popleft()
        held = self._held.pop(unit.base, None)
        if held is not None:
            return held
        obs, reward, terminated, truncated, info = unit.engine.ale.recv()
        return self._result(unit, obs, reward, terminated, truncated, info)

    def _drain(self) -> None:
        """Wait for the steps still running, so no engine is reset or closed mid-step."""
        while self._due:
            unit = self._due.popleft()
            if self._held.pop(unit.base, None) is None:
                unit.engine.ale.recv()

    def _result(
        self,
        unit: _Engine,
        obs: np.ndarray[Any, Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        info: dict[str, Any],
    ) -> BatchResult:
        local = info.pop("env_id")
        unit.rows[local] = np.arange(len(local))
        if self._clip:
            info["reward"] = reward.astype(np.float64)
            reward = np.sign(reward)
        if self._episodic:
            terminated = self._lost_lives(unit, local, obs, reward, terminated, truncated, info)
        final = info.get("final_obs")
        if final is not None:
            # The engine leaves the rows of envs that did not end undefined: zeros on the wire.
            final = final.copy()
            final[~(terminated | truncated)] = 0
            info["final_obs"] = final.squeeze(1) if self._squeeze else final
        if self._squeeze:
            obs = obs.squeeze(1)
        env_id = local if unit.base == 0 else (local + unit.base).astype(np.int32)
        return BatchResult(obs, reward.astype(np.float64), terminated, truncated, env_id, info)

    def _lost_lives(
        self,
        unit: _Engine,
        local: np.ndarray[Any, Any],
        obs: np.ndarray[Any, Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        info: dict[str, Any],
    ) -> np.ndarray[Any, Any]:
        """``episodic_life`` on a batch: the rows whose env lost a life (game on) end
        their episode; the rows of envs whose episode so ended last time are resets."""
        lives = info["lives"]
        info["terminated"] = terminated.copy()
        resets = unit.lost[local]
        if resets.any() and self.autoreset_mode == "next_step":
            reward[resets] = 0
        lost = (lives < unit.lives[local]) & ~terminated & ~truncated & ~resets
        unit.lives[local] = lives
        unit.lost[local] = lost
        if not lost.any():
            return terminated
        if self.autoreset_mode == "same_step":
            final = info.get("final_obs")
            final = info["final_obs"] = np.zeros_like(obs) if final is None else final.copy()
            final[lost] = obs[lost]
        ended: np.ndarray[Any, Any] = terminated | lost
        return ended

    def state(self) -> dict[str, Any]:
        return {"config": dict(self._config), "game": self._config["game"]}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._drain()
        for unit in self._engines:
            unit.engine.close()
