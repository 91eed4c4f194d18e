"""Structured values of many envs, stacked as ``gymnasium.vector`` stacks them.

A vector client of envs whose observations are not one array (SPEC section
22) hands out one value for all envs, in the layout of Gymnasium's
``batch_space`` and ``concatenate`` for the equivalent Gymnasium space:

==================================  ==========================================
one env's space                     the stacked value of ``n`` envs
==================================  ==========================================
array (Box), multi_discrete,        an array ``(n, *shape)`` of the space's dtype
multi_binary                        (multi_binary: int8)
discrete                            an int64 array ``(n,)``
text, json                          a tuple of ``n`` strings (maps)
dict                                a dict of the stacked values, same keys
tuple                               a tuple of the stacked values
==================================  ==========================================

Actions go the other way (Gymnasium's ``iterate``): :func:`unstack` splits a
batch of actions in that layout into one wire value per env.

Neither needs Gymnasium: the spaces are section 22's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    MultiBinarySpec,
    MultiDiscreteSpec,
    Space,
    TupleSpec,
)

__all__ = ["Stacked", "single", "unstack"]

Array = np.ndarray[Any, Any]


class Stacked:
    """Rows of `num_envs` values of `space`, written one env at a time.

    Written like an array's rows (``stacked[r] = value`` with a wire value);
    :meth:`copy` and :meth:`buffers` give the stacked value. Arrays are
    preallocated; text and json rows are lists until handed out as tuples.
    """

    __slots__ = ("space", "tree")

    def __init__(self, space: Space, num_envs: int, tree: Any = None) -> None:
        self.space = space
        self.tree = _empty(space, num_envs) if tree is None else tree

    def __setitem__(self, row: int, value: Any) -> None:
        _put(self.space, self.tree, row, value)

    def __getitem__(self, rows: slice) -> Stacked:
        """The first rows (array rows are views, so writes go to this buffer)."""
        return Stacked(self.space, 0, _rows(self.space, self.tree, rows))

    def like(self) -> Stacked:
        """An empty buffer of the same space and rows."""
        return Stacked(self.space, _count(self.space, self.tree))

    def copy(self) -> Any:
        """The stacked value, its arrays copied."""
        return _out(self.space, self.tree, copy=True)

    def buffers(self) -> Any:
        """The stacked value, its arrays this buffer's (valid until the next write)."""
        return _out(self.space, self.tree, copy=False)

    def single(self, value: Any) -> Any:
        """One env's wire value as Gymnasium gives it (see :func:`single`)."""
        return single(self.space, value)


def _array_dtype(space: Space) -> Any:
    """The dtype of a space stacked as an array (None: stacked as a tuple)."""
    if isinstance(space, ArraySpec | MultiDiscreteSpec):
        return space.dtype
    if isinstance(space, MultiBinarySpec):
        return np.int8
    if isinstance(space, DiscreteSpec):
        return np.int64
    return None


def _shape(space: Space) -> tuple[int, ...]:
    if isinstance(space, ArraySpec | MultiBinarySpec):
        return space.shape
    if isinstance(space, MultiDiscreteSpec):
        return tuple(space.nvec.shape)
    return ()


def _empty(space: Space, n: int) -> Any:
    if isinstance(space, DictSpec):
        return {k: _empty(s, n) for k, s in space.spaces}
    if isinstance(space, TupleSpec):
        return [_empty(s, n) for s in space.spaces]
    dtype = _array_dtype(space)
    if dtype is None:
        return [None] * n
    return np.zeros((n, *_shape(space)), dtype)


def _put(space: Space, tree: Any, r: int, value: Any) -> None:
    if isinstance(space, DictSpec):
        for key, sub in space.spaces:
            _put(sub, tree[key], r, value[key])
    elif isinstance(space, TupleSpec):
        for sub, column, item in zip(space.spaces, tree, value, strict=True):
            _put(sub, column, r, item)
    else:
        tree[r] = value


def _rows(space: Space, tree: Any, rows: slice) -> Any:
    if isinstance(space, DictSpec):
        return {k: _rows(s, tree[k], rows) for k, s in space.spaces}
    if isinstance(space, TupleSpec):
        return [_rows(s, t, rows) for s, t in zip(space.spaces, tree, strict=True)]
    return tree[rows]


def _count(space: Space, tree: Any) -> int:
    if isinstance(space, DictSpec):
        key, sub = space.spaces[0]
        return _count(sub, tree[key])
    if isinstance(space, TupleSpec):
        return _count(space.spaces[0], tree[0])
    return len(tree)


def _out(space: Space, tree: Any, *, copy: bool) -> Any:
    if isinstance(space, DictSpec):
        return {k: _out(s, tree[k], copy=copy) for k, s in space.spaces}
    if isinstance(space, TupleSpec):
        return tuple(_out(s, t, copy=copy) for s, t in zip(space.spaces, tree, strict=True))
    if type(tree) is list:
        return tuple(tree)
    return tree.copy() if copy else tree


def single(space: Space, value: Any) -> Any:
    """One env's wire value as Gymnasium gives it (for ``final_obs``): a tuple
    space's list as a tuple, a dict in the space's key order, a discrete value an
    int, arrays copied (writable, no longer tied to the frame they came in)."""
    if isinstance(space, DictSpec):
        return {k: single(s, value[k]) for k, s in space.spaces}
    if isinstance(space, TupleSpec):
        return tuple(single(s, v) for s, v in zip(space.spaces, value, strict=True))
    if isinstance(space, DiscreteSpec):
        return int(value)
    if isinstance(value, np.ndarray):
        return np.array(value)
    return value


def unstack(space: Space, actions: Any, n: int) -> list[Any]:
    """A batch of `n` actions of `space` in Gymnasium's vector layout (the stacked
    layout above) as `n` wire values, one per env.

    Raises:
        ValueError: the batch does not hold `n` actions, saying where.
    """
    return _split(space, actions, n, "actions")


def _split(space: Space, actions: Any, n: int, where: str) -> list[Any]:
    if isinstance(space, DictSpec):
        if not isinstance(actions, dict) or set(actions) != {k for k, _ in space.spaces}:
            raise ValueError(
                f"{where} must be a dict with the keys {[k for k, _ in space.spaces]} "
                f"(the action space's), each holding {n} actions; got {type(actions).__name__}"
            )
        columns = {k: _split(s, actions[k], n, f"{where}[{k!r}]") for k, s in space.spaces}
        return [{k: columns[k][i] for k, _ in space.spaces} for i in range(n)]
    if isinstance(space, TupleSpec):
        if not isinstance(actions, list | tuple) or len(actions) != len(space.spaces):
            raise ValueError(
                f"{where} must be a tuple of {len(space.spaces)} items (the action "
                f"space's), each holding {n} actions; got {type(actions).__name__}"
            )
        parts = [
            _split(s, a, n, f"{where}[{j}]")
            for j, (s, a) in enumerate(zip(space.spaces, actions, strict=True))
        ]
        return [list(row) for row in zip(*parts, strict=True)]
    if _array_dtype(space) is None:  # text, json: one value per env
        items = list(actions) if isinstance(actions, list | tuple | np.ndarray) else None
        if items is None or len(items) != n:
            raise ValueError(f"{where} must be a sequence of {n} values, one per env")
        return items
    array = np.asarray(actions)
    if array.ndim == 0 or array.shape[0] != n:
        raise ValueError(
            f"{where} must have a first axis of {n}, one action per env; got shape "
            f"{list(array.shape)}"
        )
    if isinstance(space, DiscreteSpec):
        return [int(a) for a in array.reshape(n)] if array.dtype.kind in "iu" else list(array)
    return list(np.ascontiguousarray(array))
