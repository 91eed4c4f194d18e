"""The arrays a vector client hands out: results gathered into Gymnasium's vector layout."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..protocol import Result
from ..spaces import ArraySpec, DiscreteSpec, Space
from ._stack import Stacked, unstack

__all__ = [
    "Arrival",
    "Batcher",
    "StepBatch",
    "action_array",
    "action_list",
    "action_splitter",
    "env_id_list",
    "final_infos",
    "mask_infos",
    "seeds_for",
    "stack_infos",
]

Array = np.ndarray[Any, Any]
#: ``(observations, rewards, terminations, truncations, infos)``; the observations
#: are one array, or for structured spaces their stacked value (:mod:`._stack`).
StepBatch = tuple[Any, Array, Array, Array, dict[str, Any]]
#: One env's result as it arrived: env id, result, and for a same-step
#: autoreset the ending step's ``(observation, info)``.
Arrival = tuple[int, Result, Any]

_DTYPES: dict[type, Any] = {int: np.int64, float: np.float64, bool: np.bool_}


class Batcher:
    """Preallocated arrays for `num_envs` results of observation spec `spec`.

    Args:
        num_envs: rows of the by-env arrays.
        spec: the observation space every env shares: an array space's
            observations are one array ``(num_envs, *shape)``, another
            space's are stacked as ``gymnasium.vector`` stacks them
            (:class:`~openenv_ws.client._stack.Stacked`).
        copy: hand out copies (True) or the buffers themselves, valid until
            the next call (False).
    """

    def __init__(self, num_envs: int, spec: Space, *, copy: bool) -> None:
        self.num_envs = num_envs
        self.copy = copy
        self.stacked = not isinstance(spec, ArraySpec)
        self.obs: Any = (
            np.zeros((num_envs, *spec.shape), spec.dtype)
            if isinstance(spec, ArraySpec)
            else Stacked(spec, num_envs)
        )
        self.rewards = np.zeros(num_envs, np.float64)
        self.terminations = np.zeros(num_envs, np.bool_)
        self.truncations = np.zeros(num_envs, np.bool_)
        # recv()'s rows in arrival order; made on first use (step() never needs it).
        self._arrival_obs: Any = None

    def batch(self, arrivals: list[Arrival], *, by_id: bool) -> StepBatch:
        """The arrays of `arrivals`: one row per env (`by_id`, envs that did not
        answer keep their rows) or one row per arrival with ``infos["env_id"]``."""
        k = len(arrivals)
        if by_id:
            obs, rewards, terms, truncs = (
                self.obs,
                self.rewards,
                self.terminations,
                self.truncations,
            )
        else:
            if self._arrival_obs is None:
                self._arrival_obs = self.obs.like() if self.stacked else np.zeros_like(self.obs)
            obs = self._arrival_obs[:k]
            rewards = np.empty(k, np.float64)
            terms = np.empty(k, np.bool_)
            truncs = np.empty(k, np.bool_)
        infos: list[dict[str, Any] | None] = [None] * (self.num_envs if by_id else k)
        finals: list[tuple[int, Any, Any]] = []
        for row, (i, frame, final) in enumerate(arrivals):
            r = i if by_id else row
            if frame.obs is not None:
                obs[r] = frame.obs
            rewards[r] = frame.reward
            terms[r] = frame.terminated
            truncs[r] = frame.truncated
            infos[r] = frame.info
            if final is not None:
                finals.append((r, *final))
        info = stack_infos(infos)
        if finals:
            if self.stacked:  # each final observation as Gymnasium gives one env's
                finals = [(r, self.obs.single(o), i) for r, o, i in finals]
            info.update(final_infos(finals, len(infos)))
        if not by_id:
            info["env_id"] = np.fromiter((a[0] for a in arrivals), np.int64, k)
        if self.copy:
            return obs.copy(), rewards.copy(), terms.copy(), truncs.copy(), info
        if self.stacked:
            return obs.buffers(), rewards, terms, truncs, info
        return obs, rewards, terms, truncs, info


def stack_infos(infos: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Per-env info maps in Gymnasium's vector layout: one array per key plus its
    ``_key`` mask, nested maps likewise (as ``gymnasium.vector.VectorEnv._add_info``)."""
    out: dict[str, Any] = {}
    for r, info in enumerate(infos):
        if info:
            _add_info(out, info, r, len(infos))
    return out


def final_infos(finals: Sequence[tuple[int, Any, dict[str, Any] | None]], n: int) -> dict[str, Any]:
    """Same-step autoreset's infos of `n` rows from ``(row, final_obs, final_info)`` of the
    rows whose episode ended: ``final_obs`` an object array (None elsewhere) and
    ``final_info`` a dict of arrays, each with its ``_`` mask, as Gymnasium's
    ``SyncVectorEnv`` gives them."""
    final_obs = np.full(n, None, object)
    ended: list[dict[str, Any] | None] = [None] * n
    mask = np.zeros(n, np.bool_)
    for r, obs, info in finals:
        final_obs[r], ended[r], mask[r] = obs, info, True
    return {
        "final_obs": final_obs,
        "_final_obs": mask,
        "final_info": stack_infos(ended),
        "_final_info": mask.copy(),
    }


def mask_infos(infos: dict[str, Any], n: int, rows: Array | None = None) -> dict[str, Any]:
    """Columns of `n` rows without masks (a vector session's) in Gymnasium's layout:
    each key gets its ``_key`` mask, True for `rows` (a bool array; None: every row);
    the other rows are emptied (0, None for objects) as Gymnasium leaves them.

    Keys that have their mask already, and ``env_id``, are kept as they are.
    """
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") or "_" + key in infos or key == "env_id":
            out[key] = value
            continue
        if isinstance(value, dict):
            out[key] = mask_infos(value, n, rows)
        elif rows is not None and not rows.all():
            value = np.array(value)
            value[~rows] = None if value.dtype == object else 0
            out[key] = value
        else:
            out[key] = value
        out["_" + key] = np.ones(n, np.bool_) if rows is None else rows.copy()
    return out


def _add_info(out: dict[str, Any], info: dict[str, Any], r: int, n: int) -> None:
    for key, value in info.items():
        column = out.get(key)
        mask = out.setdefault("_" + key, np.zeros(n, np.bool_))
        if isinstance(value, dict) and (column is None or isinstance(column, dict)):
            _add_info(out.setdefault(key, {}), value, r, n)
        else:
            if not isinstance(column, np.ndarray):  # (a scalar after maps: the maps go)
                column = out[key] = _column(value, n)
            try:
                column[r] = value
            except (TypeError, ValueError, OverflowError):
                # Envs disagree on the type or shape: keep each row as an object.
                old, column = column, np.full(n, None, object)
                for i in np.flatnonzero(mask):
                    column[i] = old[i]
                out[key] = column
                column[r] = value
        mask[r] = True


def _column(value: Any, n: int) -> Array:
    """An empty column of `n` rows for values like `value` (Gymnasium's dtypes)."""
    if type(value) in _DTYPES:
        return np.zeros(n, _DTYPES[type(value)])
    if isinstance(value, np.number):
        return np.zeros(n, value.dtype)
    if isinstance(value, np.ndarray):
        return np.zeros((n, *value.shape), value.dtype)
    return np.full(n, None, object)


def seeds_for(seed: int | Sequence[int | None] | None, ids: list[int], n: int) -> list[int | None]:
    """The seed of each reset env: `seed` + env id for one int (as Gymnasium does),
    or one seed per env (all `n`, or one per reset env)."""
    if seed is None:
        return [None] * len(ids)
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in ids]
    seeds = list(seed)
    if len(seeds) == n and len(ids) != n:
        seeds = [seeds[i] for i in ids]
    if len(seeds) != len(ids):
        raise ValueError(f"{len(seeds)} seeds for {len(ids)} envs; give one seed per env")
    return [None if s is None else int(s) for s in seeds]


def action_list(actions: Any, n: int) -> list[Any]:
    """`actions` as a list of `n` actions, one per env.

    Raises:
        ValueError: `actions` is not a sequence of `n` items (a scalar for
            several envs, or the wrong length), naming the expected shape.
    """
    if isinstance(actions, np.ndarray):
        got = actions.shape
        acts: Any = actions.tolist() if actions.ndim else None
    else:
        try:
            acts = list(actions)
        except TypeError:
            acts = None
        got = (len(acts),) if acts is not None else type(actions).__name__
    if acts is None or len(acts) != n:
        raise _shape_error(n, got)
    return acts  # type: ignore[no-any-return]


def action_splitter(space: Space) -> Callable[[Any, int], list[Any]]:
    """How a vector client splits a batch of actions of `space` into one per env:
    :func:`action_list` for an array or discrete space, Gymnasium's vector layout
    (:func:`~openenv_ws.client._stack.unstack`) for the others."""
    if isinstance(space, ArraySpec | DiscreteSpec):
        return action_list
    return partial(unstack, space)


def _shape_error(n: int, got: Any) -> ValueError:
    return ValueError(
        f"actions must have shape ({n},), one action per env (a sequence or an array "
        f"with a first axis of {n}); got {got}"
    )


def action_array(actions: Any, n: int, space: Space | None = None) -> Array:
    """`actions` as sent on the wire: for a discrete `space` (or None), a 1-d array of `n`
    integer actions, one per env; for another space, an array with a row per env
    (:func:`value_rows`).

    An integer array of shape ``(n,)`` is used as it is; a sequence of ints
    becomes one.

    Raises:
        ValueError: not `n` actions (the message names the shape ``(n,)``), or
            actions that are not integers (floats, bools, objects).
    """
    if space is not None and not isinstance(space, DiscreteSpec):
        return value_rows(actions, n, space)
    if type(actions) is np.ndarray:
        arr: Array = actions
    else:
        try:
            arr = np.asarray(actions)
        except (TypeError, ValueError):  # ragged nesting
            raise _shape_error(n, type(actions).__name__) from None
    if arr.shape != (n,):
        raise _shape_error(n, arr.shape if arr.ndim else type(actions).__name__)
    if arr.dtype.kind not in "iu":
        raise ValueError(
            f"actions must be integers (an array of an integer dtype or a list of ints, "
            f"shape ({n},)); got dtype {arr.dtype.name}"
        )
    return arr


def env_id_list(env_ids: Any, n: int) -> list[int]:
    """`env_ids` (a sequence or an integer array) as a list of distinct env ids in [0, n).

    Raises:
        ValueError: an id that is not an integer in range, or one given twice.
    """
    ids = env_ids.tolist() if isinstance(env_ids, np.ndarray) else list(env_ids)
    for i in ids:
        if type(i) is not int or not 0 <= i < n:
            raise ValueError(f"env id {i!r} is not an integer in [0, {n})")
    if len(set(ids)) != len(ids):
        raise ValueError(f"env ids {ids} repeat an env; name each env once")
    return ids


def value_rows(actions: Any, n: int, space: Space) -> Array:
    """`actions` of a space other than a discrete one as an array with a row per env:
    for an array space, of shape ``(n, *shape)`` in the space's dtype (cast when the
    cast keeps the kind, e.g. a policy's float64 to float32).

    Raises:
        ValueError: not `n` rows of the space's shape, or numbers of another kind.
    """
    arr: Array = actions if type(actions) is np.ndarray else np.asarray(actions)
    if isinstance(space, ArraySpec):
        want = (n, *space.shape)
        if arr.shape != want:
            raise ValueError(
                f"actions must have shape {want}, a row of the action space's shape "
                f"{space.shape} per env; got {arr.shape}"
            )
        if arr.dtype != space.dtype:
            if not np.can_cast(arr.dtype, space.dtype, "same_kind"):
                raise ValueError(
                    f"actions of dtype {arr.dtype.name} do not cast to the action space's "
                    f"{space.dtype}"
                )
            arr = arr.astype(space.dtype)
        return arr
    if arr.ndim == 0 or len(arr) != n or arr.dtype.kind not in "biuf":
        raise ValueError(
            f"actions must be an array of numbers with {n} rows, one per env; got an array "
            f"of {arr.dtype.name} and shape {arr.shape}"
        )
    return arr
