"""The n-dimensional array extension of protocol v1 (MessagePack ext type 1).

Payload layout (all integers little-endian)::

    offset 0       u8   dtype code (see DTYPE_CODES)
    offset 1       u8   ndim (0..MAX_NDIM)
    offset 2       u32  x ndim   the shape, outermost dimension first
    offset 2+4*nd  raw C-order element bytes, exactly prod(shape) * itemsize

Decoding is :func:`numpy.frombuffer` over the payload: no per-element work.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .errors import ProtocolError

__all__ = ["DTYPE_CODES", "EXT_NDARRAY", "MAX_NDIM", "array_ext_parts", "decode_array"]

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
_ALLOWED = ", ".join(DTYPE_CODES)
_U32_MAX = 0xFFFFFFFF


def _ext_header(length: int) -> bytes:
    """The MessagePack ext header for a payload of `length` bytes (smallest form)."""
    if length == 1:
        return bytes((0xD4, EXT_NDARRAY))
    if length == 2:
        return bytes((0xD5, EXT_NDARRAY))
    if length == 4:
        return bytes((0xD6, EXT_NDARRAY))
    if length == 8:
        return bytes((0xD7, EXT_NDARRAY))
    if length == 16:
        return bytes((0xD8, EXT_NDARRAY))
    if length <= 0xFF:
        return struct.pack(">BBb", 0xC7, length, EXT_NDARRAY)
    if length <= 0xFFFF:
        return struct.pack(">BHb", 0xC8, length, EXT_NDARRAY)
    return struct.pack(">BIb", 0xC9, length, EXT_NDARRAY)


def _wire_array(arr: np.ndarray[Any, Any]) -> tuple[int, np.ndarray[Any, Any]]:
    """The dtype code and a little-endian C-contiguous view (or copy) of `arr`."""
    code = DTYPE_CODES.get(arr.dtype.name)
    if code is None:
        raise ProtocolError(
            f"arrays of dtype {arr.dtype} cannot be sent; allowed dtypes: {_ALLOWED}"
        )
    if arr.ndim > MAX_NDIM:
        raise ProtocolError(f"arrays of {arr.ndim} dimensions cannot be sent; at most {MAX_NDIM}")
    if any(d > _U32_MAX for d in arr.shape):
        raise ProtocolError(f"array dimension above 2**32-1 in shape {arr.shape}")
    wire = _CODE_TO_DTYPE[code]
    if arr.dtype != wire or not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr, dtype=wire)
    return code, arr


def array_ext_parts(arr: np.ndarray[Any, Any]) -> tuple[bytes, memoryview]:
    """The encoded ext as (headers, data): concatenated they are the MessagePack bytes.

    The element bytes are returned as a memoryview so callers can splice them
    into the output with a single copy.
    """
    code, arr = _wire_array(arr)
    ndim = arr.ndim
    head = struct.pack(f"<BB{ndim}I", code, ndim, *arr.shape)
    data = memoryview(arr).cast("B") if arr.size else memoryview(b"")
    return _ext_header(len(head) + data.nbytes) + head, data


def array_ext_payload(arr: np.ndarray[Any, Any]) -> bytes:
    """The ext payload alone (for MessagePack libraries' ``default`` hooks)."""
    code, arr = _wire_array(arr)
    return struct.pack(f"<BB{arr.ndim}I", code, arr.ndim, *arr.shape) + arr.tobytes()


def decode_array(payload: bytes) -> np.ndarray[Any, Any]:
    """Decode an ext type 1 payload into a read-only array viewing `payload`.

    Raises:
        ProtocolError: unknown dtype, too many dimensions, or a data size that
            does not match the shape. Nothing is allocated before these checks.
    """
    size = len(payload)
    if size < 2:
        raise ProtocolError(f"array extension of {size} bytes is shorter than its 2-byte header")
    code, ndim = payload[0], payload[1]
    dtype = _CODE_TO_DTYPE.get(code)
    if dtype is None:
        raise ProtocolError(f"array dtype code {code} is unknown; allowed codes are 0..11")
    if ndim > MAX_NDIM:
        raise ProtocolError(f"array has {ndim} dimensions; at most {MAX_NDIM} are allowed")
    offset = 2 + 4 * ndim
    if size < offset:
        raise ProtocolError(
            f"array header declares {ndim} dimensions but the extension holds only {size} bytes"
        )
    shape = struct.unpack_from(f"<{ndim}I", payload, 2)
    count = 1
    for d in shape:
        count *= d
    expected = count * dtype.itemsize
    if expected != size - offset:
        raise ProtocolError(
            f"array of shape {shape} and dtype {dtype.name} needs {expected} data bytes, "
            f"but the extension carries {size - offset}"
        )
    if count == 0:
        return np.zeros(shape, dtype=dtype)
    arr = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape)
    if code == 0 and arr.view(np.uint8).max() > 1:
        raise ProtocolError("bool array holds bytes other than 0 and 1")
    return arr
