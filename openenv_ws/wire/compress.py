"""Compressed observations (``protocol/SPEC.md`` section 19): the codecs, what
each side negotiates in ``open``, the server's packer and the client's unpacker.

An observation array of a session that negotiated a codec travels as
MessagePack extension type 3: a small header (codec, flags, serial number,
dtype and shape) and the compressed element bytes. In *delta* mode a frame
may carry the XOR of the observation with the previous one the client
decoded (mostly zero bytes for an Atari screen, so it compresses to a few
hundred bytes); key frames carry the observation itself. Decompression is
bounded: a declared size beyond what the client accepts (the session's
observation size, never above its ``max_frame_size``) is refused before
anything is allocated, and a zstd frame's own content size must match it.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .._arrays import array_head, check_bools, ext_header, parse_array_head, wire_array
from ..errors import ProtocolError

__all__ = [
    "CODECS",
    "DELTA",
    "EXT_COMPRESSED",
    "MIN_COMPRESSED_BYTES",
    "CompressedArray",
    "ObsPacker",
    "ObsUnpacker",
    "available_codecs",
    "choose",
    "mode_name",
]

#: The MessagePack extension type of a compressed array.
EXT_COMPRESSED = 3
#: Wire codes of the codecs: LZ4 block format, and one Zstandard frame.
CODECS: dict[str, int] = {"lz4": 1, "zstd": 2}
_NAMES = {code: name for name, code in CODECS.items()}
#: Flag bit: the elements are the XOR of the observation with the previous one.
DELTA = 0x01
#: Arrays smaller than this go as they are (ext type 1), even in a compressed session.
MIN_COMPRESSED_BYTES = 512

_PREFIX = struct.Struct("<BBI")  # codec, flags, serial
_ZSTD_LEVEL = 1


def _load() -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        import lz4.block
    except ImportError:  # pragma: no cover - a dependency; only a broken install lacks it
        pass
    else:
        found["lz4"] = lz4.block
    try:
        import zstandard
    except ImportError:  # pragma: no cover - as above
        pass
    else:
        found["zstd"] = zstandard
    return found


_MODULES = _load()


def available_codecs() -> tuple[str, ...]:
    """The codecs this installation can compress and decompress, in wire-code order."""
    return tuple(name for name in CODECS if name in _MODULES)


def choose(
    offered: Sequence[str], delta: bool, preference: Sequence[str], *, allow_delta: bool = True
) -> tuple[str | None, bool]:
    """The server's pick: the first codec of `preference` the client offered, and
    whether frames may be deltas (the client accepts them and the transport allows).

    Names the client lists that this server does not know are passed over.
    """
    for name in preference:
        if name in offered and name in _MODULES:
            return name, bool(delta and allow_delta)
    return None, False


def mode_name(codec: str | None, delta: bool) -> str | None:
    """How a session's observations travel, e.g. ``"zstd+delta"``; None: uncompressed."""
    if codec is None:
        return None
    return f"{codec}+delta" if delta else codec


class CompressedArray(NamedTuple):
    """An observation ready to splice into a frame: the ext header with the array
    header, then the compressed bytes; `source` is the array itself, for a view of
    the frame that cannot carry compressed bytes (JSON)."""

    head: bytes
    data: bytes
    source: np.ndarray[Any, Any]

    @property
    def nbytes(self) -> int:
        """Bytes it takes in the frame."""
        return len(self.head) + len(self.data)


class ObsPacker:
    """The server side of a compressed session: compresses observations, keeps the
    previous one for delta frames, and adds their raw and sent bytes to `totals`,
    ``[raw, sent]`` (the server's count for the mode; default: the packer's own)."""

    __slots__ = (
        "_base",
        "_code",
        "_compress",
        "_key",
        "_scratch",
        "codec",
        "delta",
        "serial",
        "totals",
    )

    def __init__(self, codec: str, delta: bool, totals: list[int] | None = None) -> None:
        self.codec = codec
        #: [element bytes compressed, bytes they took on the wire].
        self.totals = [0, 0] if totals is None else totals
        self._code = CODECS[codec]
        self._compress: Callable[[Any], bytes] = (
            _MODULES["zstd"].ZstdCompressor(level=_ZSTD_LEVEL).compress
            if codec == "zstd"
            else functools.partial(_MODULES["lz4"].compress, store_size=False)
        )
        self.delta = delta
        self._base: np.ndarray[Any, Any] | None = None  # the observation the client holds
        self._scratch: np.ndarray[Any, Any] | None = None
        self._key = True
        #: Serial number of the last compressed observation sent (0: none yet).
        self.serial = 0

    def key(self) -> None:
        """Make the next observation a key frame (after reset, restore, resume)."""
        self._key = True

    def pack(self, obs: np.ndarray[Any, Any]) -> CompressedArray:
        """`obs` compressed, as a key frame or (delta mode) against the previous one.

        Raises:
            ProtocolError: an array protocol v1 cannot carry (as ext type 1 would).
        """
        code, arr = wire_array(obs)
        base = self._base
        flags = 0
        if not self.delta:
            elements = arr
        elif (
            self._key
            or base is None
            or base.shape != arr.shape
            or base.dtype != arr.dtype
            or not arr.size
        ):
            self._base = base = np.array(arr, copy=True)
            self._scratch = np.empty(base.nbytes, np.uint8)
            elements = arr
        else:
            scratch = self._scratch
            assert scratch is not None
            np.bitwise_xor(
                arr.reshape(-1).view(np.uint8), base.reshape(-1).view(np.uint8), out=scratch
            )
            np.copyto(base, arr)
            elements = scratch
            flags = DELTA
        self._key = False
        self.serial = serial = (self.serial + 1) & 0xFFFFFFFF
        data = self._compress(elements)
        head = _PREFIX.pack(self._code, flags, serial) + array_head(code, arr.shape)
        size = len(head) + len(data)
        totals = self.totals
        totals[0] += arr.nbytes
        totals[1] += size
        return CompressedArray(ext_header(size, EXT_COMPRESSED) + head, data, arr)


class ObsUnpacker:
    """The client side of a compressed session: decompresses observations (bounded by
    `max_bytes`: the client's own limit, never what the server declares) and applies
    delta frames."""

    __slots__ = ("_base", "_codec", "_dctx", "_lz4", "codec", "delta", "max_bytes", "serial")

    def __init__(self, codec: str, delta: bool, max_bytes: int) -> None:
        if codec not in _MODULES:
            raise ProtocolError(
                f"the server chose compression '{codec}', which this client cannot decode"
            )
        self.codec = codec
        self._codec = CODECS[codec]
        self._dctx = _MODULES["zstd"].ZstdDecompressor() if codec == "zstd" else None
        self._lz4 = _MODULES["lz4"] if codec == "lz4" else None
        self.delta = delta
        self.max_bytes = max_bytes
        self._base: np.ndarray[Any, Any] | None = None
        #: Serial number of the last observation decoded (0: none, or dropped).
        self.serial = 0

    def forget(self) -> None:
        """Drop the held observation (the server sends a key frame next)."""
        self._base = None
        self.serial = 0

    def unpack(self, payload: bytes) -> np.ndarray[Any, Any]:
        """The observation in an ext type 3 payload (read-only).

        Raises:
            ProtocolError: a payload that breaks section 19: another codec, unknown
                flags, a bad array header, a size above the session's observations,
                damaged compressed bytes, or a delta against an observation this
                client does not hold. The held observation is dropped then: delta
                frames are refused until the next key frame.
        """
        try:
            return self._unpack(payload)
        except ProtocolError:
            self.forget()
            raise

    def _unpack(self, payload: bytes) -> np.ndarray[Any, Any]:
        if len(payload) < _PREFIX.size:
            raise ProtocolError(
                f"compressed array of {len(payload)} bytes is shorter than its "
                f"{_PREFIX.size}-byte header"
            )
        code, flags, serial = _PREFIX.unpack_from(payload)
        if code != self._codec:
            raise ProtocolError(
                f"compressed array uses codec {_NAMES.get(code, code)!r}, but the session "
                f"negotiated {_NAMES[self._codec]!r}"
            )
        if flags & ~DELTA:
            raise ProtocolError(f"compressed array has unknown flags 0x{flags:02x}")
        dtype, shape, count, start = parse_array_head(payload, _PREFIX.size)
        size = count * dtype.itemsize
        if size > self.max_bytes:
            raise ProtocolError(
                f"compressed array declares {size} bytes (shape {shape}, {dtype.name}); "
                f"this client accepts at most {self.max_bytes} (its max_frame_size, or less "
                "when the session's observations are smaller)"
            )
        base = None
        if flags & DELTA:
            base = self._base
            if not self.delta:
                raise ProtocolError("delta frame in a session that did not negotiate deltas")
            if base is None or self.serial != (serial - 1) & 0xFFFFFFFF:
                raise ProtocolError(
                    f"delta frame {serial} applies to observation {(serial - 1) & 0xFFFFFFFF}, "
                    f"but this client holds {self.serial or 'none'}"
                )
            if base.shape != shape or base.dtype != dtype:
                raise ProtocolError(
                    f"delta frame of shape {shape} and dtype {dtype.name} applies to an "
                    f"observation of shape {base.shape} and dtype {base.dtype.name}"
                )
        data = self._decompress(memoryview(payload)[start:], size)
        arr: np.ndarray[Any, Any] = np.frombuffer(data, np.uint8)
        if base is not None:
            arr = np.bitwise_xor(arr, base.reshape(-1).view(np.uint8))
            arr.flags.writeable = False
        arr = arr.view(dtype).reshape(shape)
        check_bools(arr)
        if self.delta:
            self._base = arr
        self.serial = serial
        return arr

    def _decompress(self, data: memoryview, size: int) -> bytes:
        try:
            if self._lz4 is not None:
                out: bytes = self._lz4.decompress(data, uncompressed_size=size) if size else b""
            else:
                zstd = _MODULES["zstd"]
                declared = zstd.frame_content_size(data)
                if declared != size:
                    raise ProtocolError(
                        "compressed array's zstd frame declares "
                        + ("no content size" if declared < 0 else f"{declared} bytes")
                        + f" for an array of {size}"
                    )
                out = self._dctx.decompress(data, max_output_size=size)  # type: ignore[union-attr]
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - any codec failure is a damaged payload
            raise ProtocolError(f"compressed array is damaged: {exc}") from None
        if len(out) != size:
            raise ProtocolError(
                f"compressed array decompresses to {len(out)} bytes, not the {size} it declares"
            )
        return out
