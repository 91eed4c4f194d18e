"""The JSON view of protocol v1 frames, used by the HTTP fallback.

A frame's JSON view is the MessagePack map of the frame written as JSON: the
same keys (``op``, ``id`` and the op's fields) and the same values. JSON has
no arrays of raw bytes and no binary strings, so two tagged objects stand in
for them:

- an array (ext type 1) is ``{"$ndarray": DTYPE, "shape": [...], "data": B64}``
  where ``DTYPE`` is a name of the dtype table (``"uint8"``, ...) and ``B64``
  is the standard base64 of the little-endian, C-order element bytes;
- binary data (``bin``) is ``{"$bytes": B64}``.

An object with exactly those keys is always read as the tagged value. Floats
that JSON cannot write (NaN, infinities) appear as ``NaN``/``Infinity``, as
Python's ``json`` module writes them; use MessagePack bodies where a parser
refuses them.

Nothing here knows the frame layout: frames are turned into maps with
:func:`~openenv_ws.protocol.frame_fields` and maps into frames with
:func:`~openenv_ws.protocol.client_frame_from_map` /
:func:`~openenv_ws.protocol.server_frame_from_map`, so the JSON view and the
MessagePack frames go through the same checks.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any

import numpy as np

from ._arrays import DTYPE_CODES, MAX_NDIM, array_ext_payload, decode_array
from .errors import ProtocolError
from .protocol import (
    ClientFrame,
    ServerFrame,
    client_frame_from_map,
    frame_fields,
    server_frame_from_map,
)
from .wire.compress import CompressedArray
from .wire.limits import MAX_DEPTH, MAX_SPEC_DEPTH

__all__ = [
    "ARRAY_TAG",
    "BYTES_TAG",
    "MAX_JSON_DEPTH",
    "client_frame_from_json",
    "frame_to_json",
    "from_json_value",
    "server_frame_from_json",
    "to_json_value",
]

#: Key of the tagged object that stands for an array.
ARRAY_TAG = "$ndarray"
#: Key of the tagged object that stands for binary data.
BYTES_TAG = "$bytes"

#: How many levels of lists/objects a JSON body may nest, the frame's own object counting
#: as level 1: a frame, a spec (the deepest value, protocol section 9) and a tagged array
#: or bytes object in it. Deeper bodies are refused (``bad_frame``) before being walked.
MAX_JSON_DEPTH = 2 + MAX_SPEC_DEPTH

_DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
_ARRAY_KEYS = frozenset({ARRAY_TAG, "shape", "data"})
_U32_MAX = 0xFFFFFFFF


# --------------------------------------------------------------------------- values


def _array_to_json(arr: np.ndarray[Any, Any]) -> dict[str, Any]:
    # The ext payload is the one place that defines the wire bytes of an array.
    payload = array_ext_payload(arr)
    code, ndim = payload[0], payload[1]
    shape = struct.unpack_from(f"<{ndim}I", payload, 2)
    data = memoryview(payload)[2 + 4 * ndim :]
    return {
        ARRAY_TAG: _DTYPE_NAMES[code],
        "shape": list(shape),
        "data": base64.b64encode(data).decode("ascii"),
    }


def to_json_value(value: Any) -> Any:
    """A protocol value (numbers, strings, arrays, bytes, lists, maps) as JSON-ready data.

    Raises:
        ProtocolError: a value protocol v1 cannot carry.
    """
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float or kind is str:
        return value
    if kind is dict:
        return {k: to_json_value(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_json_value(v) for v in value]
    if isinstance(value, np.ndarray):
        return _array_to_json(value)
    if kind is CompressedArray:  # JSON carries the array itself (SPEC section 19)
        return _array_to_json(value.source)
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_TAG: base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.generic):
        return value.item()
    raise ProtocolError(f"values of type {kind.__name__} have no JSON view")


def _b64(text: Any, what: str) -> bytes:
    if type(text) is not str:
        raise ProtocolError(f"{what} must be a base64 string, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{what} is not valid base64") from None


def _array_from_json(obj: dict[str, Any]) -> np.ndarray[Any, Any]:
    name, shape = obj[ARRAY_TAG], obj["shape"]
    code = DTYPE_CODES.get(name) if type(name) is str else None
    if code is None:
        raise ProtocolError(f"array dtype {name!r} is unknown; use one of {', '.join(DTYPE_CODES)}")
    if (
        type(shape) is not list
        or len(shape) > MAX_NDIM
        or not all(type(d) is int and 0 <= d <= _U32_MAX for d in shape)
    ):
        raise ProtocolError(
            f"array shape must be a list of at most {MAX_NDIM} integers in 0..{_U32_MAX}"
        )
    data = _b64(obj["data"], "array data")
    # The ext payload decoder holds every size and dtype rule of SPEC section 6.
    head = struct.pack(f"<BB{len(shape)}I", code, len(shape), *shape)
    return decode_array(head + data)


def from_json_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parsed JSON as a protocol value: tagged objects become arrays and bytes.

    Args:
        max_depth: how many levels of lists and objects `value` may nest (itself
            counting as level 1); deeper is refused before it is walked.

    Raises:
        ProtocolError: a tagged object that is not a valid array or base64 string,
            or a value nested deeper than `max_depth`.
    """
    return _from_json(value, max_depth)


def _from_json(value: Any, levels: int) -> Any:
    kind = type(value)
    if kind is dict:
        if levels <= 0:
            raise _too_deep()
        if ARRAY_TAG in value and value.keys() == _ARRAY_KEYS:
            return _array_from_json(value)
        if BYTES_TAG in value and len(value) == 1:
            return _b64(value[BYTES_TAG], "bytes")
        return {k: _from_json(v, levels - 1) for k, v in value.items()}
    if kind is list:
        if levels <= 0:
            raise _too_deep()
        return [_from_json(v, levels - 1) for v in value]
    return value


def _too_deep() -> ProtocolError:
    return ProtocolError(
        f"the JSON body nests lists/objects deeper than {MAX_JSON_DEPTH} levels "
        f"(free-form values may nest {MAX_DEPTH}, a spec {MAX_SPEC_DEPTH}; protocol section 9)",
        code="bad_frame",
    )


# --------------------------------------------------------------------------- frames


def frame_to_json(frame: ClientFrame | ServerFrame) -> bytes:
    """The JSON view of `frame`, UTF-8 encoded.

    Raises:
        ProtocolError: a field holds a value protocol v1 cannot carry.
    """
    return json.dumps(to_json_value(dict(frame_fields(frame))), separators=(",", ":")).encode()


def _parse(data: bytes | bytearray | str, defaults: dict[str, Any] | None) -> dict[str, Any]:
    try:
        obj = json.loads(data) if data else {}
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise ProtocolError(f"the body is not valid JSON ({exc})") from None
    if type(obj) is not dict:
        raise ProtocolError(f"the JSON body must be an object, got {type(obj).__name__}")
    raw: dict[str, Any] = from_json_value(obj)
    if defaults:
        for key, value in defaults.items():
            raw.setdefault(key, value)
    return raw


def client_frame_from_json(
    data: bytes | bytearray | str, *, defaults: dict[str, Any] | None = None
) -> ClientFrame:
    """Read the JSON view of a client frame; `defaults` fill absent keys (e.g. ``op``, ``id``).

    Raises:
        ProtocolError: not JSON, not an object, a bad tagged value, or any
            error :func:`~openenv_ws.protocol.decode_client_frame` raises.
    """
    return client_frame_from_map(_parse(data, defaults))


def server_frame_from_json(data: bytes | bytearray | str) -> ServerFrame:
    """Read the JSON view of a server frame (errors as :func:`client_frame_from_json`)."""
    return server_frame_from_map(_parse(data, None))
