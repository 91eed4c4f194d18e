"""Gymnasium's spaces and values as section 22's spaces and wire values, both ways.

One mapping for both sides: the server's Gymnasium plugin describes an
environment's spaces with :func:`space_of` and sends its observations with
:func:`to_wire`; the client's adapters (:mod:`openenv_ws.gym`) rebuild the
Gymnasium spaces with :func:`gym_space` and read observations back with
:func:`to_gym`. An action goes the other way: :func:`to_wire` on the client,
:func:`gym_action` (checked against the space) on the server.

==================  =====================  ===============================
Gymnasium           section 22             value on the wire
==================  =====================  ===============================
Box                 array (per-element     array
                    bounds as arrays)
Discrete(n, start)  discrete               int
MultiDiscrete       multi_discrete         array
MultiBinary         multi_binary           array (int8)
Text                text                   str
Dict                dict (key order kept)  map
Tuple               tuple                  list (a tuple again in Gymnasium)
==================  =====================  ===============================

Gymnasium's Graph, Sequence and OneOf have no section 22 space: :func:`space_of`
refuses them. A text space without a charset (any character, e.g. from an
OpenEnv environment) becomes :class:`AnyText`, a json space :class:`JsonSpace`.

Requires ``gymnasium`` (``pip install 'openenv-ws[gym]'``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from ._arrays import DTYPE_CODES
from .errors import InvalidAction
from .spaces import (
    ArraySpec,
    Bound,
    DictSpec,
    DiscreteSpec,
    JsonSpec,
    MultiBinarySpec,
    MultiDiscreteSpec,
    Space,
    SpaceError,
    TextSpec,
    TupleSpec,
)

__all__ = [
    "AnyText",
    "JsonSpace",
    "gym_action",
    "gym_space",
    "space_of",
    "to_gym",
    "to_wire",
]


class AnyText(spaces.Text):
    """Gymnasium's Text without a charset: strings of any characters (samples are
    alphanumeric)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, AnyText) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )


class JsonSpace(spaces.Space[dict[str, Any]]):
    """Maps described by a JSON Schema (an OpenEnv environment's typed model); the
    environment checks them, this space only that a value is a map.

    :meth:`sample` gives a map of the schema's required fields (a schema's
    ``const``, ``default``, one of its ``enum``, a number within its bounds, a
    short string, empty lists and maps), so ``check_env`` can step it.
    """

    def __init__(self, schema: dict[str, Any], name: str = "") -> None:
        super().__init__()
        self.schema, self.name = schema, name

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict)

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        """A map of the required fields of the schema (see the class).

        Raises:
            SpaceError: a mask or probability was given (a JSON schema has none), or
                the schema does not describe a map.
        """
        if mask is not None or probability is not None:
            raise SpaceError(f"{self!r} samples without a mask or probability")
        value = _json_sample(self.schema, self.schema.get("$defs", {}), self.np_random, 0)
        if not isinstance(value, dict):
            raise SpaceError(f"{self!r}: the schema does not describe a map; cannot sample")
        return value

    def __repr__(self) -> str:
        return f"JsonSpace({self.name or 'schema'})"

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, JsonSpace) and (self.schema, self.name) == (
            other.schema,
            other.name,
        )


#: How deep :func:`_json_sample` follows a schema (a recursive model ends there).
_SAMPLE_DEPTH = 16


def _json_sample(schema: Any, defs: Any, rng: np.random.Generator, depth: int) -> Any:
    """A value of the JSON `schema` (``$ref`` read in `defs`): see :class:`JsonSpace`."""
    if not isinstance(schema, dict) or depth > _SAMPLE_DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _json_sample(defs.get(ref.removeprefix("#/$defs/")), defs, rng, depth + 1)
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return _json_sample((usable or options)[0], defs, rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties", {})
        return {
            name: _json_sample(props.get(name, {}), defs, rng, depth + 1)
            for name in schema.get("required", [])
        }
    if kind in ("integer", "number"):
        least = schema.get("minimum", schema.get("exclusiveMinimum"))
        most = schema.get("maximum", schema.get("exclusiveMaximum"))
        low = 0.0 if least is None else float(least)
        high = low + 10 if most is None else float(most)
        number = low + (high - low) * float(rng.random())
        return int(np.clip(round(number), low, high)) if kind == "integer" else number
    if kind == "string":
        size = max(int(schema.get("minLength", 1)), 1)
        return "".join(chr(ord("a") + int(i)) for i in rng.integers(26, size=size))
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array":
        return []
    return None


# ------------------------------------------------------------------ spaces


def space_of(space: spaces.Space[Any]) -> Space:
    """The section 22 space of a Gymnasium space.

    Raises:
        SpaceError: a space section 22 has no form for (Graph, Sequence, OneOf,
            a dtype outside the dtype table, a Dict key that is not a string).
    """
    if isinstance(space, spaces.Box):
        dtype = _dtype(space.dtype)
        return ArraySpec(tuple(space.shape), dtype, _bound(space.low), _bound(space.high))
    if isinstance(space, spaces.Discrete):
        return DiscreteSpec(int(space.n), (), int(space.start))
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start, np.int64)
        return MultiDiscreteSpec(
            np.asarray(space.nvec, np.int64),
            start if start.any() else None,
            _dtype(space.dtype),
        )
    if isinstance(space, spaces.MultiBinary):
        return MultiBinarySpec(tuple(space.shape))
    if isinstance(space, AnyText):
        return TextSpec(space.max_length, space.min_length)
    if isinstance(space, spaces.Text):
        return TextSpec(space.max_length, space.min_length, space.characters)
    if isinstance(space, spaces.Dict):
        for key in space.spaces:
            if not isinstance(key, str):
                raise SpaceError(f"a Dict space's keys must be strings, got {key!r}")
        return DictSpec(tuple((k, space_of(s)) for k, s in space.spaces.items()))
    if isinstance(space, spaces.Tuple):
        return TupleSpec(tuple(space_of(s) for s in space.spaces))
    if isinstance(space, JsonSpace):
        return JsonSpec(space.schema, space.name)
    raise SpaceError(f"Gymnasium's {type(space).__name__} space has no form on the wire")


def _dtype(dtype: np.dtype[Any]) -> str:
    if dtype.name not in DTYPE_CODES:
        raise SpaceError(f"dtype {dtype.name} is not in the dtype table (SPEC section 6)")
    return dtype.name


def _bound(values: np.ndarray[Any, Any]) -> Bound:
    """One number for bounds equal for every element (None if infinite), else the array."""
    if values.size == 0 or np.all(values == values.flat[0]):
        if values.size == 0:
            return None
        first = values.flat[0].item()
        return first if math.isfinite(first) else None
    return np.array(values)


def gym_space(space: Space) -> spaces.Space[Any]:
    """The Gymnasium space of a section 22 space (a dict stays a ``Dict``)."""
    if isinstance(space, ArraySpec):
        return _box(space)
    if isinstance(space, DiscreteSpec):
        return spaces.Discrete(space.n, start=space.start)
    if isinstance(space, MultiDiscreteSpec):
        return spaces.MultiDiscrete(space.nvec, dtype=space.dtype, start=space.start)
    if isinstance(space, MultiBinarySpec):
        shape = space.shape
        return spaces.MultiBinary(shape[0] if len(shape) == 1 else list(shape))
    if isinstance(space, TextSpec):
        if not space.charset:
            return AnyText(space.max_length, min_length=space.min_length)
        return spaces.Text(space.max_length, min_length=space.min_length, charset=space.charset)
    if isinstance(space, DictSpec):
        return spaces.Dict({k: gym_space(s) for k, s in space.spaces})
    if isinstance(space, TupleSpec):
        return spaces.Tuple(tuple(gym_space(s) for s in space.spaces))
    return JsonSpace(dict(space.schema), space.name)


def _box(spec: ArraySpec) -> spaces.Box:
    dtype = np.dtype(spec.dtype)
    low: Any
    high: Any
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


# ------------------------------------------------------------------ values


def to_wire(space: Space, value: Any) -> Any:
    """A Gymnasium value of `space` as it travels: tuples as lists, numpy scalars as
    Python numbers, arrays as arrays. What is not of the space's form is left as it
    is, for the receiver to refuse."""
    if isinstance(space, ArraySpec | MultiDiscreteSpec | MultiBinarySpec):
        return value if type(value) is np.ndarray else _array_or_same(value)
    if isinstance(space, DiscreteSpec):
        return int(value) if type(value) is int or isinstance(value, np.integer) else value
    if isinstance(space, TextSpec):
        return str(value) if isinstance(value, str) else value
    if isinstance(space, DictSpec):
        if not isinstance(value, dict):
            return value
        known = {k: to_wire(s, value[k]) for k, s in space.spaces if k in value}
        return known | {k: v for k, v in value.items() if k not in known}
    if isinstance(space, TupleSpec):
        if not isinstance(value, list | tuple) or len(value) != len(space.spaces):
            return value
        return [to_wire(s, v) for s, v in zip(space.spaces, value, strict=True)]
    return value


def _array_or_same(value: Any) -> Any:
    """Numbers and (nested) lists of numbers as an array; anything else unchanged."""
    if isinstance(value, bool | str | bytes) or not isinstance(
        value, list | tuple | int | float | np.generic
    ):
        return value
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return value
    return array if array.dtype.kind in "biuf" else value


def to_gym(space: Space, value: Any, *, cast: bool = False) -> Any:
    """A wire value of `space` as Gymnasium gives it: lists of a tuple space as
    tuples, maps in the space's key order; with `cast`, arrays in the space's dtype.
    The value must be of the space (:meth:`~openenv_ws.spaces.ArraySpec.check`)."""
    if isinstance(space, ArraySpec | MultiDiscreteSpec):
        return value.astype(space.dtype, copy=False) if cast else value
    if isinstance(space, MultiBinarySpec):
        return value.astype(np.int8, copy=False) if cast else value
    if isinstance(space, DiscreteSpec):
        return int(value)
    if isinstance(space, DictSpec):
        return {k: to_gym(s, value[k], cast=cast) for k, s in space.spaces}
    if isinstance(space, TupleSpec):
        return tuple(to_gym(s, v, cast=cast) for s, v in zip(space.spaces, value, strict=True))
    return value


def unbounded(space: Space) -> Space:
    """`space` with the bounds of its float arrays dropped: what an action is checked
    against, since Gymnasium's environments take (and clip, or not) float actions
    outside their Box, and a remote one must act as ``gymnasium.make``'s would."""
    if isinstance(space, ArraySpec) and np.dtype(space.dtype).kind == "f":
        return ArraySpec(space.shape, space.dtype)
    if isinstance(space, DictSpec):
        return DictSpec(tuple((k, unbounded(s)) for k, s in space.spaces))
    if isinstance(space, TupleSpec):
        return TupleSpec(tuple(unbounded(s) for s in space.spaces))
    return space


def gym_action(space: Space, action: Any) -> Any:
    """An action from the wire as the Gymnasium value of the action `space` (pass
    :func:`unbounded` of the declared space: float bounds are not checked).

    Numbers and lists of numbers are taken for arrays (``0.5`` for a ``(1,)``
    Box); arrays are cast to the space's dtype.

    Raises:
        InvalidAction: the action is not in the space, saying where and why.
    """
    if (  # the common case, at once
        type(action) is int
        and type(space) is DiscreteSpec
        and space.start <= action < space.start + space.n
    ):
        return action
    if isinstance(space, ArraySpec) and space.shape == (1,) and _is_number(action):
        action = [action]
    action = to_wire(space, action)
    why = space.check(action)
    if why is None:
        with np.errstate(over="ignore", invalid="ignore"):
            action = to_gym(space, action, cast=True)
        why = space.check(action)  # a float64 that is infinite as a float32
    if why is not None:
        raise InvalidAction(f"the action is not in the action space: {why}")
    return action


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
