"""What a frame's fields may hold: the kinds of field value (``protocol/SPEC.md`` section 4).

A check takes the field's name and its decoded value and returns the value
for the frame, or raises :class:`~openenv_ws.errors.ProtocolError` saying
which field is wrong and what it must be. Each :class:`Kind` pairs a check
with the name the browser codec knows it by (``CHECKS`` in
``openenv_ws/web/static/protocol.js``); :mod:`.frames` gives each field its
kind, and the cross checks here to the frames that have them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

import msgpack
import numpy as np

from ..brief import brief
from ..errors import ProtocolError
from ..palette import PALETTE_BYTES
from .limits import MAX_CODEC_NAME, MAX_CODECS, MAX_DEPTH, MAX_ID, MAX_NUM_ENVS, MAX_SPEC_DEPTH

__all__ = [
    "ACTION",
    "ACTION_ROWS",
    "BIN",
    "BOOL",
    "BOOL_ROWS",
    "CODEC",
    "CODECS",
    "FLOAT",
    "FLOAT64_ROWS",
    "INT32_ROWS",
    "INT_ROWS",
    "MAP",
    "MAP_OR_NIL",
    "NUM_ENVS",
    "OPT_ARRAY",
    "OPT_INT_ROWS",
    "OPT_PALETTE",
    "OPT_STR",
    "OPT_UINT",
    "SPEC",
    "STR",
    "UINT32",
    "VALUE",
    "Check",
    "Kind",
    "batch_rows",
    "foreign",
    "open_sizes",
    "send_rows",
]

Check: TypeAlias = Callable[[str, Any], Any]
_SCALARS = frozenset({type(None), bool, int, float, str, bytes, np.ndarray})


class Kind(NamedTuple):
    """A kind of field value: its check, under the name both codecs know it by."""

    #: The key of the browser codec's check (``CHECKS`` in ``protocol.js``).
    name: str
    check: Check


def _bad(name: str, want: str, value: Any) -> ProtocolError:
    if type(value) is msgpack.Timestamp:
        return _foreign_ext()
    got = type(value).__name__
    if type(value) in (bool, int, float) or (type(value) is str and len(value) <= 20):
        got = f"{got} {value!r}"
    return ProtocolError(f"field '{name}' must be {want}, got {got}", code="bad_request")


def _foreign_ext() -> ProtocolError:
    # msgpack decodes ext type -1 (timestamp) itself instead of calling the ext hook.
    return ProtocolError("MessagePack extension type -1 is not part of protocol v1")


def _exactly(kind: type, want: str) -> Check:
    """A check that the value is of type `kind` (not a subclass), described as `want`."""

    def check(name: str, v: Any) -> Any:
        if type(v) is not kind:
            raise _bad(name, want, v)
        return v

    return check


def _or_nil(check: Check) -> Check:
    """`check`, letting nil through."""
    return lambda name, v: None if v is None else check(name, v)


BOOL = Kind("bool", _exactly(bool, "a boolean"))
STR = Kind("str", _exactly(str, "a string"))
OPT_STR = Kind("optStr", _or_nil(STR.check))
BIN = Kind("bin", _exactly(bytes, "binary data"))


def _uint(name: str, v: Any) -> int:
    if type(v) is not int or v < 0:
        raise _bad(name, "a non-negative integer", v)
    return v


def _uint32(name: str, v: Any) -> int:
    if type(v) is not int or not 0 <= v <= MAX_ID:
        raise _bad(name, f"an integer in 0..{MAX_ID}", v)
    return v


UINT32 = Kind("uint32", _uint32)
OPT_UINT = Kind("optUint", _or_nil(_uint))


def _opt_palette(name: str, v: Any) -> bytes | None:
    if v is None:
        return None
    want = f"nil or {PALETTE_BYTES} bytes of binary data (256 RGB triples)"
    if type(v) is not bytes:
        raise _bad(name, want, v)
    if len(v) != PALETTE_BYTES:
        raise ProtocolError(
            f"field '{name}' must be {want}, got {len(v)} bytes", code="bad_request"
        )
    return v


OPT_PALETTE = Kind("optPalette", _opt_palette)


def _codecs(name: str, v: Any) -> list[str]:
    want = (
        f"a list of at most {MAX_CODECS} codec names (strings of up to {MAX_CODEC_NAME} characters)"
    )
    if v is None:
        return []
    if type(v) is not list or len(v) > MAX_CODECS:
        raise _bad(name, want, v)
    for item in v:
        if type(item) is not str or len(item) > MAX_CODEC_NAME:
            raise _bad(name, want, item)
    return v


CODECS = Kind("codecs", _codecs)


def _codec(name: str, v: Any) -> str | None:
    if v is None or (type(v) is str and len(v) <= MAX_CODEC_NAME):
        return v
    raise _bad(name, f"nil or a codec name (a string of up to {MAX_CODEC_NAME} characters)", v)


CODEC = Kind("codec", _codec)


def _opt_array(name: str, v: Any) -> np.ndarray[Any, Any] | None:
    if v is None or type(v) is np.ndarray:
        return v
    raise _bad(name, "an array (ext type 1) or nil", v)


OPT_ARRAY = Kind("optArray", _opt_array)


def _structured(top: frozenset[type], want: str) -> Check:
    """A check of a structured value (section 22) whose top level is of a type in
    `top`, or a list or map of plain values (see :func:`_plain`), described as `want`."""

    def check(name: str, v: Any) -> Any:
        kind = type(v)
        if kind in top:
            return v
        if kind is list or kind is dict:
            _plain(name, v, 1)
            return v
        raise _bad(name, want, v)

    return check


_PLAIN = "made of nil, bool, number, string, binary, array, list and map"
#: A structured value (section 22): nil, a scalar, an array, or lists and maps of them.
VALUE = Kind("value", _structured(_SCALARS, _PLAIN))


def _plain(name: str, v: list[Any] | dict[Any, Any], depth: int, limit: int = MAX_DEPTH) -> None:
    """Check a free-form container: string keys, plain values, at most `limit` levels."""
    if depth > limit:
        raise ProtocolError(
            f"field '{name}' nests lists/maps deeper than {limit} levels", code="bad_request"
        )
    if type(v) is dict:
        for key in v:
            if type(key) is not str:
                raise ProtocolError(
                    f"field '{name}' has a map key of type {type(key).__name__}; keys are strings"
                )
        items: Any = v.values()
    else:
        items = v
    for item in items:
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is list or kind is dict:
            _plain(name, item, depth + 1, limit)
        else:
            raise _bad(name, _PLAIN, item)


def _map(name: str, v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise _bad(name, "a map", v)
    _plain(name, v, 1)
    return v


MAP = Kind("map", _map)


def _spec(name: str, v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise _bad(name, "a map", v)
    _plain(name, v, 1, MAX_SPEC_DEPTH)
    return v


#: An ``opened`` frame's spec: a map that may nest deeper than other maps.
SPEC = Kind("spec", _spec)


def _map_or_nil(name: str, v: Any) -> dict[str, Any]:
    return {} if v is None else _map(name, v)


#: A map; nil reads as the empty map.
MAP_OR_NIL = Kind("mapOrNil", _map_or_nil)


#: An action: bool, bin and nil are not actions.
ACTION = Kind(
    "action",
    _structured(
        frozenset({int, float, np.ndarray, str}),
        "an integer, a number, a string, an array, a list or a map",
    ),
)


def _num_envs(name: str, v: Any) -> int | None:
    if v is None or (type(v) is int and 1 <= v <= MAX_NUM_ENVS):
        return v
    raise _bad(name, f"nil or an integer in 1..{MAX_NUM_ENVS}", v)


NUM_ENVS = Kind("numEnvs", _num_envs)


def _int_rows(name: str, v: Any) -> Any:
    """One integer per env: a 1-d array of an integer dtype, or a list of integers."""
    want = "a 1-d array of an integer dtype or a list of integers"
    if type(v) is np.ndarray:
        if v.ndim != 1 or v.dtype.kind not in "iu":
            raise ProtocolError(
                f"field '{name}' must be {want}, got an array of {v.dtype.name} "
                f"and shape {list(v.shape)}",
                code="bad_request",
            )
        return v
    if type(v) is not list:
        raise _bad(name, want, v)
    for item in v:
        if type(item) is not int:
            raise _bad(name, want, item)
    return v


INT_ROWS = Kind("intRows", _int_rows)
OPT_INT_ROWS = Kind("optIntRows", _or_nil(_int_rows))


def _action_rows(name: str, v: Any) -> Any:
    """One action per env: a list of integers, or an array of a numeric dtype whose first
    dimension is the envs (a row per env: continuous and multi-discrete actions)."""
    if type(v) is np.ndarray:
        if v.ndim == 0 or v.dtype.kind not in "biuf":
            raise ProtocolError(
                f"field '{name}' must be a list of integers or an array of numbers with a row "
                f"per env, got an array of {v.dtype.name} and shape {list(v.shape)}",
                code="bad_request",
            )
        return v
    return _int_rows(name, v)


ACTION_ROWS = Kind("actionRows", _action_rows)


def _rows(dtype: str) -> Check:
    """A check that the value is a 1-d array of exactly `dtype` (a ``batch`` column)."""
    want = f"a 1-d array of {dtype}"
    exact = np.dtype(dtype)  # (compared as a dtype: its name is slow to compute)

    def check(name: str, v: Any) -> Any:
        if type(v) is not np.ndarray:
            raise _bad(name, want, v)
        if v.ndim != 1 or v.dtype != exact:
            raise ProtocolError(
                f"field '{name}' must be {want}, got an array of {v.dtype.name} "
                f"and shape {list(v.shape)}",
                code="bad_request",
            )
        return v

    return check


#: The columns of a ``batch``.
FLOAT64_ROWS = Kind("float64Rows", _rows("float64"))
BOOL_ROWS = Kind("boolRows", _rows("bool"))
INT32_ROWS = Kind("int32Rows", _rows("int32"))


def _float(name: str, v: Any) -> float:
    if type(v) is float:
        if v != v:
            raise _bad(name, "a number (not NaN)", v)
        return v
    if type(v) is int:
        return float(v)
    raise _bad(name, "a number", v)


#: A float field: encoded as float64 whatever its value (SPEC section 3).
FLOAT = Kind("float", _float)


def foreign(value: Any) -> bool:
    """Whether a value in an unknown field holds something no v1 frame may carry."""
    stack = [value]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is msgpack.Timestamp:
            return True
        if kind is list:
            stack.extend(v)
        elif kind is dict:
            if any(type(k) is not str for k in v):
                return True
            stack.extend(v.values())
    return False


def open_sizes(frame: Any) -> None:
    """An ``open``: ``batch_size`` only with ``num_envs``, and at most that."""
    if frame.batch_size is None:
        return
    if frame.num_envs is None:
        raise ProtocolError(
            "field 'batch_size' needs 'num_envs' (it is the size of a vector session's batches)",
            code="bad_request",
        )
    if frame.batch_size > frame.num_envs:
        raise ProtocolError(
            f"field 'batch_size' ({frame.batch_size}) must be at most 'num_envs' "
            f"({frame.num_envs})",
            code="bad_request",
        )


def send_rows(frame: Any) -> None:
    """A ``send``: one env id per action."""
    if frame.env_ids is not None and len(frame.env_ids) != len(frame.action):
        raise ProtocolError(
            f"field 'env_ids' has {len(frame.env_ids)} entries and 'action' {len(frame.action)}; "
            "send one env id per action",
            code="bad_request",
        )


def batch_rows(frame: Any) -> None:
    """A ``batch``: every column (``info``'s too) and the observations have one row per env."""
    rows = len(frame.reward)
    for name in ("terminated", "truncated", "env_id"):
        if len(getattr(frame, name)) != rows:
            raise ProtocolError(
                f"field '{name}' has {len(getattr(frame, name))} rows and 'reward' {rows}; "
                "every column of a batch has one row per env",
                code="bad_request",
            )
    obs = frame.obs
    if obs is not None and (obs.ndim == 0 or obs.shape[0] != rows):
        raise ProtocolError(
            f"field 'obs' has shape {list(obs.shape)}; a batch of {rows} rows needs "
            f"{rows} observations on its first axis",
            code="bad_request",
        )
    _info_columns(frame.info, rows, "info")


def _info_columns(info: dict[str, Any], rows: int, path: str) -> None:
    """Every value of a batch's `info` (nested maps included) is a column of `rows`
    rows: an array with `rows` on its first axis or a list of `rows` items."""
    for key, value in info.items():
        kind = type(value)
        if kind is dict:
            _info_columns(value, rows, f"{path}.{key}")
            continue
        got = (
            len(value)
            if kind is list
            else value.shape[0]
            if kind is np.ndarray and value.ndim
            else None
        )
        if got != rows:
            has = (
                f"no rows ({kind.__name__})"
                if got is None
                else f"{got} row" + ("" if got == 1 else "s")
            )
            column = brief(f"{path}.{key}")
            raise ProtocolError(
                f"column {column} has {has} and 'reward' {rows}; every column of a batch, "
                "info's included, has one row per env",
                code="bad_request",
            )
