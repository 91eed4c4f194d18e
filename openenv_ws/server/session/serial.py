"""A vector environment for any environment: ``num_envs`` single instances stepped in turn.

The server falls back to it for a vector session (SPEC section 21) of an
environment without a vector engine of its own
(:attr:`~openenv_ws.registry.EnvPlugin.vector`). It is synchronous only and
resets as Gymnasium's ``SyncVectorEnv`` does in the session's autoreset mode.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ...autoreset import SESSION_AUTORESET_MODES, Autoreset
from ...environment import (
    ArraySpec,
    BatchResult,
    EnvFactory,
    Environment,
    EnvResult,
    EnvSpec,
    Pace,
    VectorEnvironment,
    check_batch_obs,
)
from ...errors import EnvConfigError

__all__ = ["SerialVectorEnvironment", "stack_infos"]

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def stack_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """One array per key that every row holds as a number or bool (others are left out)."""
    out: dict[str, Any] = {}
    for key in infos[0] if infos else ():
        values = [info.get(key) for info in infos]
        if all(isinstance(v, _SCALARS) for v in values):
            out[key] = np.asarray(values)
    return out


class SerialVectorEnvironment(VectorEnvironment):
    """``num_envs`` instances of `factory`, stepped one after the other.

    Args:
        factory: builds one instance from the config.
        config: the session's config; ``autoreset_mode`` is read (and taken
            out) here, the rest goes to every instance.
        num_envs, batch_size: the session's; `batch_size` must be `num_envs`.

    Raises:
        EnvConfigError: an asynchronous session, a vector option it has no use
            for, or a config an instance refuses.
    """

    def __init__(
        self,
        factory: EnvFactory,
        config: dict[str, Any],
        num_envs: int,
        batch_size: int,
        *,
        pace: Pace | None = None,
    ) -> None:
        config = dict(config)
        mode = config.pop("autoreset_mode", "next_step")
        if mode not in SESSION_AUTORESET_MODES:
            raise EnvConfigError(
                f"autoreset_mode must be 'next_step' or 'same_step', got {mode!r}"[:200]
            )
        if "num_threads" in config:
            raise EnvConfigError(
                "num_threads is an option of vector engines; this environment has none "
                "(its envs are stepped in turn): leave it out"
            )
        if batch_size != num_envs:
            raise EnvConfigError(
                "asynchronous vector sessions (batch_size < num_envs) need an environment "
                "with a vector engine; this one steps its envs in turn: leave batch_size out"
            )
        self.num_envs = self.batch_size = num_envs
        self.autoreset_mode = mode
        self.envs: list[Environment] = []
        try:
            for _ in range(num_envs):
                with contextlib.nullcontext() if pace is None else pace(1):
                    env = factory(dict(config))
                self.envs.append(env)
                if len(self.envs) == 1:  # before building the others
                    obs = env.spec.observation
                    if not isinstance(obs, ArraySpec):
                        raise EnvConfigError(
                            "vector sessions of this environment need array observations, and "
                            f"its observations are a {obs.to_wire()['type']!r} space; open one "
                            "single session per env instead"
                        )
                    check_batch_obs(num_envs, obs.shape, np.dtype(obs.dtype).itemsize)
        except BaseException:
            self.close()
            raise
        self._autoreset = Autoreset(mode, num_envs)
        self._last: list[EnvResult] = []
        self._ids = np.arange(num_envs, dtype=np.int32)
        self._next: BatchResult | None = None

    @property
    def spec(self) -> EnvSpec:
        return self.envs[0].spec

    def reset(
        self, *, seed: int | None = None, env_ids: np.ndarray[Any, Any] | None = None
    ) -> BatchResult:
        ids = range(self.num_envs) if env_ids is None else [int(i) for i in env_ids]
        results = list(self._last) or [EnvResult(None)] * self.num_envs
        for i in ids:
            results[i] = self.envs[i].reset(seed=None if seed is None else seed + i)
            self._autoreset.ended(i, False)
        self._last = results
        zeros = np.zeros(self.num_envs)
        return self._rows(results, zeros, {})

    def send(self, actions: np.ndarray[Any, Any], env_ids: np.ndarray[Any, Any]) -> None:
        results = list(self._last)
        rewards = np.zeros(self.num_envs)
        final: dict[int, EnvResult] = {}
        # Discrete actions as Python ints; other spaces' rows as the arrays a single env takes.
        rows = actions.tolist() if actions.ndim == 1 else list(actions)
        for i, action in zip(env_ids.tolist(), rows, strict=True):
            env = self.envs[i]
            if self._autoreset.step_is_reset(i):  # next_step: the step after the end
                results[i] = env.reset()
                self._autoreset.ended(i, False)
                continue
            result = env.step(action)
            rewards[i] = result.reward
            if self._autoreset.ended(i, result.done):  # same_step: the row shows the new episode
                final[i] = result
                fresh = env.reset()
                result = EnvResult(
                    fresh.obs, result.reward, result.terminated, result.truncated, fresh.info
                )
            results[i] = result
        self._last = results
        self._next = self._rows(results, rewards, final)

    def recv(self) -> BatchResult:
        assert self._next is not None, "send comes before recv"
        return self._next

    def _rows(
        self, results: list[EnvResult], rewards: np.ndarray[Any, Any], final: dict[int, EnvResult]
    ) -> BatchResult:
        info = stack_infos([r.info for r in results])
        if final:
            first = next(iter(final.values())).obs
            assert first is not None
            final_obs = np.zeros((self.num_envs, *first.shape), first.dtype)
            for i, r in final.items():
                final_obs[i] = r.obs
            info["final_obs"] = final_obs
        return BatchResult(
            np.stack([r.obs for r in results]),
            rewards,
            np.array([r.terminated for r in results]),
            np.array([r.truncated for r in results]),
            self._ids,
            info,
        )

    def close(self) -> None:
        envs, self.envs = self.envs, []
        for env in envs:
            env.close()
