"""The reference encoder: any frame to its canonical bytes (``protocol/SPEC.md`` section 3).

One MessagePack map: ``op``, ``id``, then every field of the frame in
declaration order (absent values as nil); integers in their smallest form,
float fields as float64. Top-level arrays are spliced in with a single copy
of their element bytes. The C writer of results (:mod:`.native`) writes the
same bytes from the :func:`layout` given here.
"""

from __future__ import annotations

import functools
import struct
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack
import numpy as np

from .._arrays import EXT_NDARRAY, array_ext_parts, array_ext_payload
from .._shm import SharedArray
from ..errors import ProtocolError
from .checks import FLOAT
from .compress import CompressedArray
from .frames import ClientFrame, Error, Frame, ServerFrame, wire_fields
from .limits import MAX_ID

__all__ = ["NIL", "Layout", "array_parts", "encode", "layout", "thread_pack"]

#: The MessagePack bytes of nil.
NIL = b"\xc0"
_FALSE, _TRUE = b"\xc2", b"\xc3"
_FLOAT64 = struct.Struct(">Bd")


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(EXT_NDARRAY, array_ext_payload(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, int):
        raise ProtocolError(f"integer {obj} is outside the 64-bit range MessagePack carries")
    raise ProtocolError(
        f"values of type {type(obj).__name__} cannot be encoded; "
        "use nil, bool, int, float, str, bytes, numpy arrays, lists and maps"
    )


# A Packer is not reentrant: ``_default`` runs Python code in the middle of a
# pack, where another thread could start packing into the same buffer. So
# each thread has its own.
_packers = threading.local()


def thread_pack() -> Callable[[Any], bytes]:
    """This thread's MessagePack packer of frame values (arrays as ext type 1)."""
    pack: Callable[[Any], bytes] | None = getattr(_packers, "pack", None)
    if pack is None:
        pack = _packers.pack = msgpack.Packer(default=_default, use_bin_type=True).pack
    return pack


def _float64(value: Any) -> bytes:
    """A float field: always float64, never NaN."""
    if type(value) is not float:
        if type(value) is bool or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ProtocolError(f"it must be a number, got {type(value).__name__}")
        value = float(value)
    if value != value:
        raise ProtocolError("it is NaN; send a number")
    return _FLOAT64.pack(0xCB, value)


@functools.lru_cache(maxsize=64)
def _packed_shared(arr: SharedArray) -> bytes:
    # A session names one of the same two arrays on every step.
    packed: bytes = msgpack.packb(arr.ext())
    return packed


def array_parts(
    value: np.ndarray[Any, Any] | SharedArray | CompressedArray,
) -> tuple[bytes, bytes | memoryview]:
    """The encoded array as (extension header, element bytes), to be joined as they are.

    Raises:
        ProtocolError: an array of a dtype or shape outside protocol v1.
    """
    kind = type(value)
    if kind is SharedArray:
        return _packed_shared(value), b""  # type: ignore[arg-type]
    if kind is CompressedArray:
        return value.head, value.data  # type: ignore[union-attr]
    return array_ext_parts(value)  # type: ignore[arg-type]


def _map_parts(value: dict[Any, Any], pack: Callable[[Any], bytes], parts: list[Any]) -> None:
    """Append the bytes of a map (an ``info``) to `parts`, its arrays spliced in as
    :func:`array_ext_parts` gives them rather than through the packer's ``default``
    hook; the same bytes as ``pack(value)``."""
    append = parts.append
    append(_map_header(len(value)))
    for key, item in value.items():
        append(pack(key))
        if type(item) is np.ndarray:
            parts.extend(array_ext_parts(item))
        else:
            append(pack(item))


# Packs a header only, no Python code runs in it: one packer serves every thread.
_map_header = msgpack.Packer().pack_map_header


class Layout(NamedTuple):
    """Precomputed bytes of one frame class: everything up to the id, then each key."""

    prefix: bytes
    fields: tuple[tuple[str, bytes, bool], ...]  # (name, packed key, is a float field)

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The packed keys of the fields after the id, in wire order."""
        return tuple(key for _, key, _ in self.fields)


def _make_layout(cls: type[Frame]) -> Layout:
    wired = wire_fields(cls)
    pack = msgpack.packb
    prefix = bytes([0x80 | len(wired) + 2]) + pack("op") + pack(cls.OP) + pack("id")
    return Layout(prefix, tuple((f.name, pack(f.name), f.kind is FLOAT) for f in wired))


_LAYOUTS: dict[type[Frame], Layout] = {}
# Values spliced in as extensions: inline, in shared memory, compressed.
_ARRAYS = frozenset({np.ndarray, SharedArray, CompressedArray})


def layout(cls: type[Frame]) -> Layout:
    """The canonical layout of a frame class (the same bytes on every call)."""
    found = _LAYOUTS.get(cls)
    if found is None:
        found = _LAYOUTS[cls] = _make_layout(cls)
    return found


def encode(frame: ClientFrame | ServerFrame) -> bytes:
    """Encode a frame in the canonical form of ``protocol/SPEC.md``.

    Raises:
        ProtocolError: a value that protocol v1 cannot carry: an id outside
            0..2**32-1, a NaN reward, an integer outside 64 bits, an array of a
            dtype outside the table, or an object MessagePack cannot hold.
    """
    cls = type(frame)
    found = _LAYOUTS.get(cls) or layout(cls)
    rid = frame.id
    if (type(rid) is not int or not 0 <= rid <= MAX_ID) and not (rid is None and cls is Error):
        raise ProtocolError(f"frame id must be an integer in 0..{MAX_ID}, got {rid!r}")
    pack = thread_pack()
    parts: list[bytes | memoryview] = [found.prefix, NIL if rid is None else pack(rid)]
    append = parts.append
    try:
        for name, key, is_float in found.fields:
            value = getattr(frame, name)
            append(key)
            if is_float:
                append(_float64(value))
            elif value is None:
                append(NIL)
            elif value is True:
                append(_TRUE)
            elif value is False:
                append(_FALSE)
            elif type(value) in _ARRAYS:
                parts.extend(array_parts(value))
            elif type(value) is dict and value and type(next(iter(value.values()))) is np.ndarray:
                _map_parts(value, pack, parts)  # (a batch's info: a map of arrays)
            else:
                append(pack(value))
    except (ProtocolError, TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(
            f"field '{name}' of a '{cls.OP}' frame cannot be encoded: {exc}"
        ) from None
    return b"".join(parts)
