"""Atari vector sessions on ale-py's threaded vector engine (``AtariVectorEnv``, SPEC section 21).

One :class:`AtariVectorEnvironment` steps the ``num_envs`` envs of a vector
session in C++ threads, the GIL released. Its config is an Atari session's
(:func:`~atari.config.normalize_config`) plus the two options of vector
sessions, ``autoreset_mode`` and ``num_threads``; what the engine cannot do
(RAM observations, a frameskip pair, a mode, a difficulty, a step limit) is
refused naming the option. Every engine option is passed explicitly:
``AtariVectorEnv``'s own defaults (84x84 grayscale, stack 4, ...) are not this
project's (no preprocessing).

ale-py builds an engine's envs in one call that holds the GIL throughout (a
ROM load each, about 85 ms), so nothing else of the process runs meanwhile.
A session is therefore built from engines of at most :data:`ENVS_PER_ENGINE`
envs, one call each, and the server takes a cold-open turn before each
(``pace``): a 64-env open stalls other sessions for one small engine at a
time, never for the whole build. Its engine threads are capped
(:func:`vector_threads`).
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
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
    Pace,
    VectorEnvironment,
    check_batch_obs,
)
from openenv_ws.errors import EnvConfigError, ProtocolError

from .config import normalize_config

__all__ = [
    "ENVS_PER_ENGINE",
    "MAX_SEED",
    "MAX_THREADS",
    "VECTOR_KEYS",
    "AtariVectorEnvironment",
    "vector_kwargs",
    "vector_threads",
]

#: The options of vector sessions only (refused in a single session).
VECTOR_KEYS = ("autoreset_mode", "num_threads")
#: Largest ``num_threads`` (0: the engine's default, one per core).
MAX_THREADS = 64
#: Most envs one engine is built with: one GIL-holding constructor call (~85 ms an env).
ENVS_PER_ENGINE = 4
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
    threads = _num_threads(config.pop("num_threads", 0))
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


def _layout(num_envs: int, batch_size: int) -> list[list[tuple[int, int]]]:
    """The engines of a session: per block of `batch_size` envs stepped together,
    the (first env id, env count) of each of its engines."""
    return [
        [
            (part, min(ENVS_PER_ENGINE, block + batch_size - part))
            for part in range(block, block + batch_size, ENVS_PER_ENGINE)
        ]
        for block in range(0, num_envs, batch_size)
    ]


def _threads_per_engine(requested: int, num_envs: int, engines: int) -> int:
    """Threads each engine starts: the session's share of ``min(requested or cores,
    cores, num_envs)``, at least one per engine."""
    cores = os.cpu_count() or 1
    budget = min(requested or cores, cores, num_envs)
    return max(1, budget // engines)


def _reset_helpers(engines: int) -> int:
    """Threads that reset a session's engines at once (while they reset only)."""
    return min(engines, os.cpu_count() or 1)


def vector_threads(config: Mapping[str, Any], num_envs: int, batch_size: int | None = None) -> int:
    """Engine threads a vector session of `config` starts (before building it).

    ``num_threads`` (0: one per core) is capped by the machine's cores and by
    `num_envs`; each engine (:data:`ENVS_PER_ENGINE` envs at most) starts at
    least one thread and at most one per env. A session of several engines
    also resets them at once on up to a thread per core (while it resets).

    Raises:
        EnvConfigError: a bad ``num_threads``.
    """
    batch = num_envs if batch_size is None else batch_size
    requested = _num_threads(config.get("num_threads", 0))
    layout = _layout(num_envs, batch) if batch and not num_envs % batch else [[(0, num_envs)]]
    engines = sum(len(block) for block in layout)
    each = _threads_per_engine(requested, num_envs, engines)
    helpers = _reset_helpers(engines) if engines > 1 else 0
    return sum(min(each, size) for block in layout for _, size in block) + helpers


def _num_threads(threads: Any) -> int:
    if type(threads) is not int or not 0 <= threads <= MAX_THREADS:
        raise EnvConfigError(
            f"option 'num_threads' must be an integer in 0..{MAX_THREADS} "
            f"(0: one thread per core), got {brief(threads)}"
        )
    return threads


class _Engine:
    """One synchronous ``AtariVectorEnv``: consecutive env ids from `base`."""

    __slots__ = ("base", "engine", "lives", "lost", "paddles", "rows", "size")

    def __init__(self, base: int, size: int, kwargs: Mapping[str, Any]) -> None:
        self.base = base
        self.size = size
        self.engine = AtariVectorEnv(num_envs=size, batch_size=size, **kwargs)
        self.paddles = np.ones(size, np.float32)
        # Row of each env in the last batch (the order the engine applies actions in).
        self.rows = np.arange(size, dtype=np.intp)
        # episodic_life: each env's lives last seen, and whether its episode ended at a lost life.
        self.lives = np.zeros(size, np.int32)
        self.lost = np.zeros(size, np.bool_)
        # episodic_life: each env's lives last seen, and whether its episode ended at a lost life.
        self.lives = np.zeros(size, np.int32)
        self.lost = np.zeros(size, np.bool_)


class _Block:
    """The envs of one batch: consecutive env ids from `base`, on one or more engines
    stepped together (each in its own threads, the GIL released)."""

    __slots__ = ("base", "engines")

    def __init__(self, base: int) -> None:
        self.base = base
        self.engines: list[_Engine] = []


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

    A synchronous session is one block of ``num_envs`` envs. An asynchronous
    one (``batch_size`` < ``num_envs``, which must divide it) is
    ``num_envs / batch_size`` blocks of ``batch_size`` envs each, taken in
    turn: :meth:`send` starts a step of the block whose batch was answered
    last (its engines run it in their threads, the GIL released) and
    :meth:`recv` waits for the block that has waited longest. While the
    client works on one batch, the other blocks step. ale-py's own
    asynchronous mode is not used: in 0.12 it may never return an env's reset,
    which would lose that env for the whole session. A block is one or more
    synchronous engines of at most :data:`ENVS_PER_ENGINE` envs, stepped
    together, their batches joined. Each env's episode is the same as in a
    synchronous single-engine session with the same seed and actions.

    Args:
        config: the session's config (see :func:`vector_kwargs`).
        num_envs, batch_size: the session's.
        pace: taken around each engine's build (see :data:`~openenv_ws.environment.Pace`); None: no turns.

    Raises:
        EnvConfigError: see :func:`vector_kwargs`, or a ``batch_size`` that does
            not divide ``num_envs``.
    """

    #: Served off the event loop: a build or reset of many envs takes seconds.
    inline = False

    def __init__(
        self,
        config: Mapping[str, Any],
        num_envs: int,
        batch_size: int,
        *,
        pace: Pace | None = None,
    ) -> None:
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
        self._obs_shape = shape
        check_batch_obs(num_envs, shape, 1)
        layout = _layout(num_envs, batch_size)
        each = _threads_per_engine(
            cfg["num_threads"], num_envs, sum(len(block) for block in layout)
        )
        self._blocks: list[_Block] = []
        try:
            for parts in layout:
                block = _Block(parts[0][0])
                self._blocks.append(block)
                for base, size in parts:
                    engine_kwargs = {**kwargs, "num_threads": min(each, size)}
                    with contextlib.nullcontext() if pace is None else pace(size):
                        block.engines.append(_Engine(base, size, engine_kwargs))
        except BaseException:
            self.close()
            raise
        # The block whose batch was answered last (its actions come next), and the
        # others in the order their batches are due; a reset's batches wait in _held.
        self._current = self._blocks[0]
        self._due: collections.deque[_Block] = collections.deque()
        self._held: dict[int, BatchResult] = {}
        actions = list(self._current.engines[0].engine.ale.get_action_set())
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
        mask = None
        if env_ids is not None:  # synchronous sessions only: one block
            mask = np.zeros(self.num_envs, np.bool_)
            mask[env_ids] = True

        def reset_one(unit: _Engine) -> tuple[Any, Any]:
            options = (
                None if mask is None else {"reset_mask": mask[unit.base : unit.base + unit.size]}
            )
            return unit.engine.reset(
                seed=None if seed is None else seed + unit.base, options=options
            )

        engines = [unit for block in self._blocks for unit in block.engines]
        if len(engines) == 1:
            done = [reset_one(engines[0])]
        else:  # the engines reset at once (the GIL released), a helper thread per core
            with ThreadPoolExecutor(_reset_helpers(len(engines))) as helpers:
                done = list(helpers.map(reset_one, engines))
        results = iter(done)
        for block in self._blocks:
            parts = []
            for unit in block.engines:
                obs, info = next(results)
                rows = len(obs)
                flags = np.zeros(rows, np.bool_)
                parts.append(self._result(unit, obs, np.zeros(rows), flags, flags.copy(), info))
            self._held[block.base] = self._joined(parts)
        self._due.extend(self._blocks)
        return self._next()

    def send(self, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]) -> None:
        block = self._current
        engines = block.engines
        if len(engines) == 1:
            self._send(engines[0], actions, env_ids)
        else:
            for unit in engines:
                mine = (env_ids >= unit.base) & (env_ids < unit.base + unit.size)
                self._send(unit, actions[mine], env_ids[mine])
        self._due.append(block)

    def _send(
        self, unit: _Engine, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]
    ) -> None:
        # The engine gives each action to the env in the same row of its last batch.
        in_rows = np.empty(unit.size, np.int64)
        in_rows[unit.rows[env_ids - unit.base]] = actions
        if self._fire >= 0 and unit.lost.any():  # the reset after a lost life presses FIRE
            in_rows[unit.rows[np.flatnonzero(unit.lost)]] = self._fire
        unit.engine.ale.send(in_rows, unit.paddles)

    def recv(self) -> BatchResult:
        return self._next()

    def _next(self) -> BatchResult:
        block = self._current = self._due.popleft()
        held = self._held.pop(block.base, None)
        if held is not None:
            return held
        engines = block.engines
        if len(engines) == 1:
            return self._result(engines[0], *engines[0].engine.ale.recv())
        return self._joined([self._result(unit, *unit.engine.ale.recv()) for unit in engines])

    def _drain(self) -> None:
        """Wait for the steps still running, so no engine is reset or closed mid-step."""
        while self._due:
            block = self._due.popleft()
            if self._held.pop(block.base, None) is None:
                for unit in block.engines:
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

    def _joined(self, parts: list[BatchResult]) -> BatchResult:
        """The batch of a block from its engines' batches, in engine order."""
        if len(parts) == 1:
            return parts[0]
        info: dict[str, Any] = {}
        for key in parts[0].info.keys() | {k for p in parts for k in p.info}:
            if key == "final_obs":  # only in the batches of engines where an env ended
                info[key] = np.concatenate(
                    [
                        p.info.get(key, np.zeros((len(p.env_id), *self._obs_shape), np.uint8))
                        for p in parts
                    ]
                )
            else:
                info[key] = np.concatenate([p.info[key] for p in parts])
        return BatchResult(
            np.concatenate([p.obs for p in parts]),
            np.concatenate([p.reward for p in parts]),
            np.concatenate([p.terminated for p in parts]),
            np.concatenate([p.truncated for p in parts]),
            np.concatenate([p.env_id for p in parts]).astype(np.int32, copy=False),
            info,
        )

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
        for block in self._blocks:
            for unit in block.engines:
                unit.engine.close()
