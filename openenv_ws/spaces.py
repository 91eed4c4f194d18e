"""Spaces: what a session's observations and actions may be (``protocol/SPEC.md`` section 22).

Each space type has a wire form (a map with ``type``, carried in
``opened.spec``), built by :meth:`to_wire` and read back by
:func:`space_from_wire`, and a :meth:`check` that says why a value is not in
the space (None when it is). The types follow Gymnasium's: discrete (with a
``start``), array (Gymnasium's Box, bounds per element or for all),
multi_discrete, multi_binary, text, dict and tuple; json holds the JSON
Schema of a typed model (an OpenEnv environment's Pydantic classes).

Values on the wire: an array space's value is an array (ext type 1; 2 or 3
at the top of a ``result``), multi_discrete and multi_binary values too; a
discrete value is an integer, a text value a string, a dict value a map of
the same keys, a tuple value a list, a json value a map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from ._arrays import DTYPE_CODES

__all__ = [
    "MAX_SPACE_DEPTH",
    "MAX_SUBSPACES",
    "ArraySpec",
    "DictSpec",
    "DiscreteSpec",
    "JsonSpec",
    "MultiBinarySpec",
    "MultiDiscreteSpec",
    "Space",
    "SpaceError",
    "TextSpec",
    "TupleSpec",
    "array_bytes",
    "plain",
    "space_from_wire",
]

#: Most levels of dict/tuple spaces inside one another.
MAX_SPACE_DEPTH = 6
#: Most subspaces one dict or tuple space may hold.
MAX_SUBSPACES = 1024

Bound: TypeAlias = "float | int | np.ndarray[Any, Any] | None"


def _int_value(v: Any) -> bool:
    return type(v) is int or isinstance(v, np.integer)


@dataclass(frozen=True, slots=True)
class DiscreteSpec:
    """Integers ``start .. start + n - 1``, with optional names (one per value)."""

    n: int
    meanings: tuple[str, ...] = ()
    start: int = 0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "discrete", "n": self.n, "meanings": list(self.meanings)}
        if self.start:
            out["start"] = self.start  # absent when 0: the bytes of earlier servers
        return out

    def contains(self, value: Any) -> bool:
        return type(value) is int and self.start <= value < self.start + self.n

    def check(self, value: Any) -> str | None:
        if not _int_value(value) or type(value) is bool:
            return f"an integer is needed, got {type(value).__name__}"
        if not self.start <= int(value) < self.start + self.n:
            return f"{int(value)} is outside {self.start}..{self.start + self.n - 1}"
        return None


@dataclass(frozen=True, slots=True, eq=False)
class ArraySpec:
    """An array of a fixed shape and dtype (Gymnasium's Box), bounded by ``low`` and
    ``high``: a number for every element, an array of the shape, or None (no bound)."""

    shape: tuple[int, ...]
    dtype: str
    low: Bound = None
    high: Bound = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "array",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": self.low,
            "high": self.high,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ArraySpec):
            return NotImplemented
        return (
            self.shape == other.shape
            and self.dtype == other.dtype
            and _same_bound(self.low, other.low)
            and _same_bound(self.high, other.high)
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def check(self, value: Any, rows: int | None = None) -> str | None:
        """What is wrong with `value` as a value of this space (None: nothing); with
        `rows`, as that many values stacked (shape ``(rows, *shape)``)."""
        if type(value) is not np.ndarray:
            return f"an array is needed, got {type(value).__name__}"
        shape = self.shape if rows is None else (rows, *self.shape)
        if value.shape != shape:
            return f"shape {list(value.shape)} is not {list(shape)}"
        want = np.dtype(self.dtype)
        if value.dtype != want and not np.can_cast(value.dtype, want, "same_kind"):
            return f"dtype {value.dtype.name} does not cast to {self.dtype}"
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return "it holds NaN or infinity"
        if self.low is not None and (value < self.low).any():
            return "it is below the space's low bound"
        if self.high is not None and (value > self.high).any():
            return "it is above the space's high bound"
        return None


def _same_bound(a: Bound, b: Bound) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))  # type: ignore[arg-type]
    return a == b


@dataclass(frozen=True, slots=True, eq=False)
class MultiDiscreteSpec:
    """Arrays of integers, element i in ``start[i] .. start[i] + nvec[i] - 1``."""

    nvec: np.ndarray[Any, Any]
    start: np.ndarray[Any, Any] | None = None
    dtype: str = "int64"

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "multi_discrete",
            "nvec": self.nvec,
            "start": self.start,
            "dtype": self.dtype,
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiDiscreteSpec):
            return NotImplemented
        return (
            np.array_equal(self.nvec, other.nvec)
            and _same_bound(self.start, other.start)
            and self.dtype == other.dtype
        )

    def __hash__(self) -> int:
        return hash(("multi_discrete", self.nvec.shape))

    def check(self, value: Any) -> str | None:
        if type(value) is not np.ndarray or value.dtype.kind not in "iu":
            return "an array of integers is needed"
        if value.shape != self.nvec.shape:
            return f"shape {list(value.shape)} is not {list(self.nvec.shape)}"
        low = np.zeros_like(self.nvec) if self.start is None else self.start
        if ((value < low) | (value >= low + self.nvec)).any():
            return "an element is outside its range"
        return None


@dataclass(frozen=True, slots=True)
class MultiBinarySpec:
    """Arrays of 0 and 1 (int8) of a fixed shape."""

    shape: tuple[int, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "multi_binary", "shape": list(self.shape)}

    def check(self, value: Any) -> str | None:
        if type(value) is not np.ndarray or value.dtype.kind not in "iub":
            return "an array of 0 and 1 is needed"
        if value.shape != self.shape:
            return f"shape {list(value.shape)} is not {list(self.shape)}"
        if ((value != 0) & (value != 1)).any():
            return "an element is neither 0 nor 1"
        return None


@dataclass(frozen=True, slots=True)
class TextSpec:
    """Strings of ``min_length .. max_length`` characters, each from ``charset``
    (empty: any character)."""

    max_length: int
    min_length: int = 0
    charset: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "text",
            "min_length": self.min_length,
            "max_length": self.max_length,
            "charset": self.charset,
        }

    def check(self, value: Any) -> str | None:
        if type(value) is not str:
            return f"a string is needed, got {type(value).__name__}"
        if not self.min_length <= len(value) <= self.max_length:
            return f"{len(value)} characters, not {self.min_length}..{self.max_length}"
        if self.charset and not set(value) <= set(self.charset):
            return "it holds a character outside the space's charset"
        return None


@dataclass(frozen=True, slots=True)
class DictSpec:
    """Maps with exactly these keys, each value in its own space (order kept)."""

    spaces: tuple[tuple[str, Space], ...]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "dict", "spaces": {k: s.to_wire() for k, s in self.spaces}}

    def check(self, value: Any) -> str | None:
        if type(value) is not dict:
            return f"a map is needed, got {type(value).__name__}"
        keys = [k for k, _ in self.spaces]
        if set(value) != set(keys):
            return f"keys {sorted(map(str, value))} are not {sorted(keys)}"
        for key, space in self.spaces:
            why = space.check(value[key])
            if why is not None:
                return f"[{key!r}]: {why}"
        return None


@dataclass(frozen=True, slots=True)
class TupleSpec:
    """Lists of fixed length, item i in space i."""

    spaces: tuple[Space, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "tuple", "spaces": [s.to_wire() for s in self.spaces]}

    def check(self, value: Any) -> str | None:
        if type(value) not in (list, tuple):
            return f"a list is needed, got {type(value).__name__}"
        if len(value) != len(self.spaces):
            return f"{len(value)} items, not {len(self.spaces)}"
        for i, (item, space) in enumerate(zip(value, self.spaces, strict=True)):
            why = space.check(item)
            if why is not None:
                return f"[{i}]: {why}"
        return None


@dataclass(frozen=True, slots=True)
class JsonSpec:
    """Maps described by a JSON Schema (e.g. a Pydantic model's), checked by the
    environment that owns the model; ``name`` is the model's name."""

    schema: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"type": "json", "name": self.name, "schema": dict(self.schema)}

    def check(self, value: Any) -> str | None:
        if type(value) is not dict:
            return f"a map is needed, got {type(value).__name__}"
        return None


Space: TypeAlias = (
    "DiscreteSpec | ArraySpec | MultiDiscreteSpec | MultiBinarySpec | TextSpec | DictSpec "
    "| TupleSpec | JsonSpec"
)


def plain(observation: Space, action: Space) -> bool:
    """Whether clients that predate structured values read a session of these spaces:
    an array observation, and a discrete (from 0) or array action."""
    return isinstance(observation, ArraySpec) and (
        isinstance(action, ArraySpec) or (isinstance(action, DiscreteSpec) and action.start == 0)
    )


class SpaceError(ValueError):
    """A space's wire form that is not one of section 22's."""


def space_from_wire(d: Any, depth: int = 1) -> Space:
    """Read a space's wire form.

    Raises:
        SpaceError: naming what is wrong (an unknown type, a missing or bad field).
    """
    if type(d) is not dict:
        raise SpaceError(f"a space is a map, got {type(d).__name__}")
    kind = d.get("type", "array")
    try:
        read = _READERS[kind]
    except (KeyError, TypeError):
        raise SpaceError(f"unknown space type {kind!r}") from None
    if depth > MAX_SPACE_DEPTH:
        raise SpaceError(f"spaces nest deeper than {MAX_SPACE_DEPTH} levels")
    try:
        space: Space = read(d, depth)
    except SpaceError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise SpaceError(f"a {kind!r} space is malformed: {exc!r}") from None
    return space


def _shape(v: Any) -> tuple[int, ...]:
    if type(v) is not list or not all(type(x) is int and x >= 0 for x in v):
        raise SpaceError(f"a shape is a list of non-negative integers, got {v!r}")
    return tuple(v)


def _dtype(v: Any) -> str:
    if v not in DTYPE_CODES:
        raise SpaceError(f"dtype {v!r} is not in the dtype table (section 6)")
    return str(v)


def _bound(v: Any, shape: tuple[int, ...]) -> Bound:
    if v is None or (type(v) in (int, float)):
        return v  # type: ignore[no-any-return]
    if type(v) is np.ndarray and v.shape == shape:
        return v
    raise SpaceError(f"a bound is a number, nil or an array of shape {list(shape)}")


def _array(d: dict[str, Any], depth: int) -> ArraySpec:
    shape = _shape(d["shape"])
    return ArraySpec(
        shape, _dtype(d["dtype"]), _bound(d.get("low"), shape), _bound(d.get("high"), shape)
    )


def _discrete(d: dict[str, Any], depth: int) -> DiscreteSpec:
    n, start, names = d["n"], d.get("start") or 0, d.get("meanings") or []
    if type(n) is not int or n < 1 or type(start) is not int:
        raise SpaceError("a discrete space has an integer n >= 1 and an integer start")
    if type(names) is not list or not all(type(x) is str for x in names):
        raise SpaceError("a discrete space's meanings are a list of strings")
    return DiscreteSpec(n, tuple(names), start)


def _int_vector(v: Any, what: str) -> np.ndarray[Any, Any]:
    if type(v) is list:
        v = np.asarray(v) if all(type(x) is int for x in v) else None
    if type(v) is not np.ndarray or v.dtype.kind not in "iu":
        raise SpaceError(f"a multi_discrete space's {what} is an array of integers")
    return v.astype(np.int64)


def _multi_discrete(d: dict[str, Any], depth: int) -> MultiDiscreteSpec:
    nvec = _int_vector(d["nvec"], "nvec")
    start = None if d.get("start") is None else _int_vector(d["start"], "start")
    if (nvec < 1).any() or (start is not None and start.shape != nvec.shape):
        raise SpaceError("a multi_discrete space has nvec >= 1 and a start of nvec's shape")
    return MultiDiscreteSpec(nvec, start, _dtype(d.get("dtype") or "int64"))


def _multi_binary(d: dict[str, Any], depth: int) -> MultiBinarySpec:
    return MultiBinarySpec(_shape(d["shape"]))


def _text(d: dict[str, Any], depth: int) -> TextSpec:
    hi, lo, charset = d["max_length"], d.get("min_length") or 0, d.get("charset") or ""
    if type(hi) is not int or type(lo) is not int or not 0 <= lo <= hi or type(charset) is not str:
        raise SpaceError("a text space has 0 <= min_length <= max_length and a string charset")
    return TextSpec(hi, lo, charset)


def _dict(d: dict[str, Any], depth: int) -> DictSpec:
    spaces = d["spaces"]
    if type(spaces) is not dict or len(spaces) > MAX_SUBSPACES:
        raise SpaceError(f"a dict space's spaces are a map of at most {MAX_SUBSPACES} spaces")
    return DictSpec(tuple((str(k), space_from_wire(v, depth + 1)) for k, v in spaces.items()))


def _tuple(d: dict[str, Any], depth: int) -> TupleSpec:
    spaces = d["spaces"]
    if type(spaces) is not list or len(spaces) > MAX_SUBSPACES:
        raise SpaceError(f"a tuple space's spaces are a list of at most {MAX_SUBSPACES} spaces")
    return TupleSpec(tuple(space_from_wire(v, depth + 1) for v in spaces))


def _json(d: dict[str, Any], depth: int) -> JsonSpec:
    schema, name = d.get("schema") or {}, d.get("name") or ""
    if type(schema) is not dict or type(name) is not str:
        raise SpaceError("a json space has a map schema and a string name")
    return JsonSpec(schema, name)


_READERS: dict[str, Any] = {
    "array": _array,
    "discrete": _discrete,
    "multi_discrete": _multi_discrete,
    "multi_binary": _multi_binary,
    "text": _text,
    "dict": _dict,
    "tuple": _tuple,
    "json": _json,
}


def subspaces(space: Space) -> Sequence[Space]:
    """The spaces directly inside a dict or tuple space (none for the others)."""
    if isinstance(space, DictSpec):
        return [s for _, s in space.spaces]
    if isinstance(space, TupleSpec):
        return space.spaces
    return ()


def array_bytes(space: Space) -> int:
    """The bytes one value of `space` holds in arrays (what a client preallocates for
    it): an array space's elements, a multi_discrete's and a multi_binary's (one byte
    each, stacked as int8), 8 for a discrete value, the sum over a dict's or tuple's
    subspaces; text and json values hold none (they are as long as their frame).

    Exact integers: a shape a server declares may be far beyond any real array.
    """
    if isinstance(space, ArraySpec):
        count = 1
        for d in space.shape:
            count *= d
        return count * np.dtype(space.dtype).itemsize
    if isinstance(space, MultiDiscreteSpec):
        return int(space.nvec.size) * np.dtype(space.dtype).itemsize
    if isinstance(space, MultiBinarySpec):
        count = 1
        for d in space.shape:
            count *= d
        return count
    if isinstance(space, DiscreteSpec):
        return 8
    return sum(array_bytes(sub) for sub in subspaces(space))
