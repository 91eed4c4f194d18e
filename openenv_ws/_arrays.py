"""The n-dimensional array extension of protocol v1 (MessagePack ext type 1).

Payload layout (all integers little-endian)::

    offset 0       u8   dtype code (see DTYPE_CODES)
    offset 1       u8   ndim (0..MAX_NDIM)
    offset 2       u32  x ndim   the shape, outermost dimension first
    offset 2+4*nd  raw C-order element bytes, exactly prod(shape) * itemsize

Decoding views the payload in place: no per-element work (bool arrays are
checked to hold only 0 and 1).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .errors import ProtocolError

__all__ = [
    "DTYPE_CODES",
    "EXT_NDARRAY",
    "MAX_NDIM",
    "array_ext_parts",
    "array_ext_payload",
    "array_head",
    "check_bools",
    "decode_array",
    "ext_header",
    "parse_array_head",
    "wire_array",
]

#: MessagePack extension type code of an n-dimensional array.
EXT_NDARRAY = 1
#: Largest number of dimensions an array may have.
MAX_NDIM = 16

#: Wire code of every allowed dtype; all multi-byte types are little-endian.
DTYPE_CODES: dict[str, int] = {
    "bool": 0,
    "uint8": 1,
    "int8": 2,
    "uint16": 3,
    "int16": 4,
    "uint32": 5,
    "int32": 6,
    "uint64": 7,
    "int64": 8,
    "float16": 9,
    "float32": 10,
    "float64": 11,
}
_CODE_TO_DTYPE: dict[int, np.dtype[Any]] = {
    code: np.dtype(name).newbyteorder("<") for name, code in DTYPE_CODES.items()
}
# Keyed by dtype object: a dict hit is far cheaper than ``dtype.name``. Only
# little-endian (and byte-order-free) dtypes hit; the rest take the slow path.
_DTYPE_TO_CODE: dict[np.dtype[Any], int] = {dt: code for code, dt in _CODE_TO_DTYPE.items()}
_ALLOWED = ", ".join(DTYPE_CODES)
_U32_MAX = 0xFFFFFFFF
# numpy sizes are signed 64-bit; larger shapes cannot exist even with no elements.
_MAX_NBYTES = (1 << 63) - 1
_SHAPE_STRUCTS = tuple(struct.Struct(f"<{n}I") for n in range(MAX_NDIM + 1))
_HEAD_STRUCTS = tuple(struct.Struct(f"<BB{n}I") for n in range(MAX_NDIM + 1))
_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}  # payload length -> fixext byte


def ext_header(length: int, code: int = EXT_NDARRAY) -> bytes:
    """The MessagePack header of an extension of type `code` whose payload is `length`
    bytes long (the smallest form)."""
    fixed = _FIXEXT.get(length)
    if fixed is not None:
        return bytes((fixed, code))
    if length <= 0xFF:
        return struct.pack(">BBb", 0xC7, length, code)
    if length <= 0xFFFF:
        return struct.pack(">BHb", 0xC8, length, code)
    return struct.pack(">BIb", 0xC9, length, code)


def wire_array(arr: np.ndarray[Any, Any]) -> tuple[int, np.ndarray[Any, Any]]:
    """The dtype code and a little-endian C-contiguous view (or copy) of `arr`."""
    code = _DTYPE_TO_CODE.get(arr.dtype)
    if code is None:
        code = DTYPE_CODES.get(arr.dtype.name)  # e.g. a big-endian dtype
        if code is None:
            raise ProtocolError(
                f"arrays of dtype {arr.dtype} cannot be sent; allowed dtypes: {_ALLOWED}"
            )
    if arr.ndim > MAX_NDIM:
        raise ProtocolError(f"arrays of {arr.ndim} dimensions cannot be sent; at most {MAX_NDIM}")
    if arr.ndim and max(arr.shape) > _U32_MAX:
        raise ProtocolError(f"array dimension above 2**32-1 in shape {arr.shape}")
    if not arr.flags.c_contiguous or arr.dtype != _CODE_TO_DTYPE[code]:
        arr = np.asarray(arr, dtype=_CODE_TO_DTYPE[code], order="C")  # keeps 0-d arrays 0-d
    return code, arr


def _head(code: int, arr: np.ndarray[Any, Any]) -> bytes:
    head = _HEAD_STRUCTS[arr.ndim].pack(code, arr.ndim, *arr.shape)
    if len(head) + arr.nbytes > _U32_MAX:
        raise ProtocolError(
            f"array of {arr.nbytes} bytes cannot be sent; one extension holds at most 4 GiB"
        )
    return head


# The step loop sends arrays of one dtype and shape again and again: their headers
# (ext header and array head), by (dtype, shape) of C-contiguous wire-ready arrays.
_HEADERS: dict[tuple[np.dtype[Any], tuple[int, ...]], bytes] = {}
# The arrays received likewise: (dtype, shape, data offset, data bytes) by the
# payload's head bytes, each checked once by parse_array_head.
_HEADS: dict[bytes, tuple[np.dtype[Any], tuple[int, ...], int, int]] = {}
_MAX_CACHED = 64


def array_ext_parts(arr: np.ndarray[Any, Any]) -> tuple[bytes, memoryview]:
    """The encoded ext as (headers, data): concatenated they are the MessagePack bytes.

    The element bytes are returned as a memoryview so callers can splice them
    into the output with a single copy.

    Raises:
        ProtocolError: a dtype outside :data:`DTYPE_CODES`, more than
            :data:`MAX_NDIM` dimensions, or a dimension above 2**32-1.
    """
    key = (arr.dtype, arr.shape)
    headers = _HEADERS.get(key)
    if headers is not None and arr.flags.c_contiguous and arr.size:
        return headers, arr.data.cast("B")
    code, arr = wire_array(arr)
    head = _head(code, arr)
    data = arr.data.cast("B") if arr.size else memoryview(b"")
    headers = ext_header(len(head) + data.nbytes) + head
    if key == (arr.dtype, arr.shape) and arr.size:  # wire-ready as it came
        if len(_HEADERS) >= _MAX_CACHED:
            _HEADERS.clear()
        _HEADERS[key] = headers
    return headers, data


def array_ext_payload(arr: np.ndarray[Any, Any]) -> bytes:
    """The ext payload alone (for MessagePack libraries' ``default`` hooks).

    Raises:
        ProtocolError: as :func:`array_ext_parts`.
    """
    code, arr = wire_array(arr)
    return _head(code, arr) + arr.tobytes()


def array_head(code: int, shape: tuple[int, ...]) -> bytes:
    """The dtype code, ndim and shape bytes that start an array payload."""
    return _HEAD_STRUCTS[len(shape)].pack(code, len(shape), *shape)


def parse_array_head(
    payload: bytes, start: int = 0
) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    """Read the dtype code, ndim and shape at `start`: (dtype, shape, element count, end).

    Raises:
        ProtocolError: unknown dtype, too many dimensions, a truncated shape,
            or a zero-size shape too large to exist.
    """
    size = len(payload) - start
    if size < 2:
        raise ProtocolError(f"array extension of {size} bytes is shorter than its 2-byte header")
    code, ndim = payload[start], payload[start + 1]
    dtype = _CODE_TO_DTYPE.get(code)
    if dtype is None:
        raise ProtocolError(f"array dtype code {code} is unknown; allowed codes are 0..11")
    if ndim > MAX_NDIM:
        raise ProtocolError(f"array has {ndim} dimensions; at most {MAX_NDIM} are allowed")
    end = start + 2 + 4 * ndim
    if len(payload) < end:
        raise ProtocolError(
            f"array header declares {ndim} dimensions but the extension holds only {size} bytes"
        )
    shape = _SHAPE_STRUCTS[ndim].unpack_from(payload, start + 2)
    count = 1
    for d in shape:
        count *= d
    if not count:
        # A zero-size array still needs a representable shape: the bytes it would
        # hold with its zero dimensions left out must fit a signed 64-bit size.
        bound = dtype.itemsize
        for d in shape:
            bound *= d or 1
        if bound > _MAX_NBYTES:
            raise ProtocolError(f"array shape {shape} is too large to exist (over 2**63-1 bytes)")
    return dtype, shape, count, end


def decode_array(payload: bytes) -> np.ndarray[Any, Any]:
    """Decode an ext type 1 payload into a read-only array viewing `payload`.

    Raises:
        ProtocolError: unknown dtype, too many dimensions, a shape too large to
            exist, a data size that does not match the shape, or a bool array
            holding bytes other than 0 and 1. Nothing is allocated before the
            size checks.
    """
    size = len(payload)
    known = (
        _HEADS.get(payload[: 2 + 4 * payload[1]]) if size >= 2 and type(payload) is bytes else None
    )
    if known is not None and known[2] + known[3] == size:
        dtype, shape, offset, _ = known
        if dtype.kind == "b":
            _check_bools(payload, offset)
        return np.ndarray(shape, dtype, payload, offset)
    dtype, shape, count, offset = parse_array_head(payload)
    expected = count * dtype.itemsize
    if expected == size - offset and count and type(payload) is bytes:
        if len(_HEADS) >= _MAX_CACHED:
            _HEADS.clear()
        _HEADS[payload[:offset]] = (dtype, shape, offset, expected)
    if expected != len(payload) - offset:
        raise ProtocolError(
            f"array of shape {shape} and dtype {dtype.name} needs {expected} data bytes, "
            f"but the extension carries {len(payload) - offset}"
        )
    if dtype.kind == "b":
        _check_bools(payload, offset)
    arr: np.ndarray[Any, Any] = np.ndarray(shape, dtype, payload, offset)
    return arr


def _check_bools(payload: bytes | bytearray | memoryview, offset: int) -> None:
    """Raise unless the bytes of a bool array (from `offset`) are all 0 or 1."""
    data = memoryview(payload)[offset:]
    if len(data) <= 4096:  # bytes.translate deletes 0 and 1: anything left is bad
        bad = bool(data.tobytes().translate(None, b"\x00\x01"))
    else:
        bad = bool(np.frombuffer(data, np.uint8).max() > 1)
    if bad:
        raise ProtocolError("bool array holds bytes other than 0 and 1")


def check_bools(arr: np.ndarray[Any, Any]) -> None:
    """Raise unless `arr`, if of dtype bool, holds only the bytes 0 and 1 (an array
    that arrived another way than ext type 1: from the shared region, decompressed).

    Raises:
        ProtocolError: a bool array holding another byte.
    """
    if arr.dtype.kind == "b" and arr.size and arr.view(np.uint8).max() > 1:
        raise ProtocolError("bool array holds bytes other than 0 and 1")
