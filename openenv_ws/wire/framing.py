"""RFC 6455 frames, sans I/O, for both ends of a connection.

Parsing works on a caller's buffer and offsets: :func:`parse_head` reads the
header of the frame at ``buf[pos:end]`` and tells where its payload lies, or
that the header is not complete yet; the caller reads more and asks again, so
a frame may arrive in any number of pieces. Every violation raises
:class:`FrameError` carrying the close code to send. :class:`FrameReader`
keeps a buffer of its own for callers that just feed bytes in;
:class:`Assembler` joins fragments into messages. :func:`serialize` and
:func:`frame_head` build frames for either role (a client masks, a server does
not).

The sync client's step exchange reads frames in C (``openenv_ws/_wire.c``)
with the same rules; this module is the reference and every other path.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

_c_apply_mask: Callable[[Any, Any], bytes] | None
try:
    from websockets.speedups import apply_mask as _c_apply_mask
except ImportError:  # pragma: no cover - websockets built without its C extension
    _c_apply_mask = None

_native: Any
try:
    from .. import _wire as _native  # type: ignore[attr-defined, no-redef, unused-ignore]
except ImportError:  # pragma: no cover - built without the C extensions
    _native = None

__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONT",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "Assembler",
    "Frame",
    "FrameError",
    "FrameReader",
    "apply_mask",
    "close_code_allowed",
    "close_payload",
    "frame_head",
    "parse_close",
    "parse_head",
    "serialize",
]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10

_U16 = struct.Struct("!BBH")
_U64 = struct.Struct("!BBQ")
_CLOSE_CODE = struct.Struct("!H")
#: Close codes a peer may send (RFC 6455 7.4 and the IANA registry), besides 3000-4999.
_SENDABLE_CODES = frozenset(
    (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014)
)
_MAX_CONTROL = 125
_MAX_REASON = 123


class FrameError(Exception):
    """A frame that breaks RFC 6455 or a limit: the close code to send, and why."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Frame(NamedTuple):
    """One frame as read: its flags, opcode and (unmasked) payload."""

    fin: bool
    opcode: int
    payload: bytes
    rsv: int = 0


def _apply_mask(data: bytes | bytearray | memoryview, key: bytes | bytearray | memoryview) -> bytes:
    n = len(data)
    pad = (bytes(key) * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(pad, "little")).to_bytes(n, "little")


#: `data` XOR the 4-byte masking `key` repeated (masking and unmasking alike), as bytes:
#: websockets' C function where it is built.
apply_mask: Callable[[bytes | bytearray | memoryview, bytes | bytearray | memoryview], bytes] = (
    _apply_mask if _c_apply_mask is None else _c_apply_mask
)


def parse_head(
    buf: bytes | bytearray | memoryview, pos: int, end: int, masked: bool, limit: int | None
) -> tuple[int, int, int] | None:
    """The frame whose header starts at ``buf[pos]``, the buffer's data ending at `end`.

    Returns ``(first_byte, start, stop)``, the payload lying at ``buf[start:stop]``
    (its masking key, when masked, at ``buf[start - 4:start]``); the frame is
    complete once ``stop <= end``. None while the header itself is incomplete.

    Args:
        masked: whether the frame must be masked (a server reading a client's
            frames) or must not be (a client reading a server's).
        limit: the largest payload accepted (None: any); a longer declared
            length is refused before a byte of it is buffered.

    Raises:
        FrameError: 1002 for the wrong masking, reserved bits, an unknown
            opcode, a control frame fragmented or above 125 bytes; 1009 for a
            payload above `limit`.
    """
    if end - pos < 2:
        return None
    first = buf[pos]
    second = buf[pos + 1]
    if second & 0x80:
        if not masked:
            raise FrameError(1002, "the server sent a masked frame")
    elif masked:
        raise FrameError(1002, "the client sent an unmasked frame")
    if first & 0x70:
        raise FrameError(1002, "a frame used reserved bits (no extension was agreed)")
    opcode = first & 0x0F
    if opcode & 0x08:
        if opcode > OP_PONG:
            raise FrameError(1002, f"a frame with the unknown opcode {opcode}")
        if not first & 0x80:
            raise FrameError(1002, "a fragmented control frame")
    elif opcode > OP_BINARY:
        raise FrameError(1002, f"a frame with the unknown opcode {opcode}")
    length = second & 0x7F
    start = pos + 2
    if length > _MAX_CONTROL:
        if opcode & 0x08:
            raise FrameError(1002, "a control frame above 125 bytes")
        if length == 126:
            if end - pos < 4:
                return None
            length = (buf[pos + 2] << 8) | buf[pos + 3]
            start = pos + 4
        else:
            if end - pos < 10:
                return None
            length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
            start = pos + 10
    if limit is not None and length > limit:
        reader = "server" if masked else "client"
        raise FrameError(
            1009, f"a frame of {length} bytes is above the {reader}'s limit of {limit}"
        )
    if masked:
        start += 4
    return first, start, start + length


def frame_head(
    opcode: int, length: int, *, fin: bool = True, rsv: int = 0, key: bytes = b""
) -> bytes:
    """A frame header declaring `length` payload bytes, followed by the masking `key` if any."""
    if fin and not rsv and not key:  # the common case, first
        if length < 126:
            return bytes((0x80 | opcode, length))
        if length < 65536:
            return _U16.pack(0x80 | opcode, 126, length)
        return _U64.pack(0x80 | opcode, 127, length)
    first = (0x80 if fin else 0) | (rsv & 7) << 4 | opcode & 0x0F
    bit = 0x80 if key else 0
    if length < 126:
        head = bytes((first, bit | length))
    elif length < 65536:
        head = _U16.pack(first, bit | 126, length)
    else:
        head = _U64.pack(first, bit | 127, length)
    return head + key if key else head


def serialize(opcode: int, payload: bytes, *, mask: bool, fin: bool = True, rsv: int = 0) -> bytes:
    """One frame carrying `payload`: masked with a fresh random key for a client (`mask`)."""
    if not mask:
        return frame_head(opcode, len(payload), fin=fin, rsv=rsv) + payload
    if _native is not None and fin and not rsv:
        frame: bytes = _native.mask_frame(opcode, payload)
        return frame
    key = os.urandom(4)
    return frame_head(opcode, len(payload), fin=fin, rsv=rsv, key=key) + apply_mask(payload, key)


def close_code_allowed(code: int) -> bool:
    """Whether a close frame may carry `code` (1005, 1006 and 1015 never travel)."""
    return code in _SENDABLE_CODES or 3000 <= code <= 4999


def parse_close(payload: bytes | bytearray | memoryview) -> tuple[int, str]:
    """A close frame's code and reason; an empty payload is code 1005, no reason.

    Raises:
        FrameError: 1002 for a one-byte payload or a code that may not be sent,
            1007 for a reason that is not UTF-8.
    """
    if len(payload) == 0:
        return 1005, ""
    if len(payload) == 1:
        raise FrameError(1002, "a close frame with a one-byte payload")
    (code,) = _CLOSE_CODE.unpack_from(payload)
    if not close_code_allowed(code):
        raise FrameError(1002, f"a close frame with the code {code}, which may not be sent")
    try:
        reason = bytes(payload[2:]).decode()
    except UnicodeDecodeError:
        raise FrameError(1007, "a close frame whose reason is not UTF-8") from None
    return code, reason


def close_payload(code: int, reason: str = "") -> bytes:
    """A close frame's payload: the code and as much of the reason as fits (123 bytes)."""
    data = reason.encode()
    if len(data) > _MAX_REASON:
        data = data[:_MAX_REASON].decode(errors="ignore").encode()
    return _CLOSE_CODE.pack(code) + data


class Assembler:
    """Joins a fragmented data message, within a size limit.

    :attr:`active` is True between a message's first fragment and its last.
    """

    __slots__ = ("_opcode", "_parts", "active", "max_size")

    def __init__(self, max_size: int | None) -> None:
        self.max_size = max_size
        self.active = False
        self._parts: bytearray | None = None
        self._opcode = OP_BINARY

    @property
    def size(self) -> int:
        """Bytes of the message received so far (0 outside a message)."""
        return 0 if self._parts is None else len(self._parts)

    def add(
        self, opcode: int, fin: bool, payload: bytes | bytearray | memoryview
    ) -> tuple[int, bytes] | None:
        """Take a data frame: ``(opcode, message)`` once the message is whole, else None.

        Raises:
            FrameError: 1002 for a new message inside a fragmented one or a
                continuation of nothing, 1009 above the size limit, 1007 for a
                text message that is not UTF-8.
        """
        parts = self._parts
        if opcode != OP_CONT:
            if parts is not None:
                raise FrameError(1002, "a new message inside a fragmented one")
            if fin:
                return opcode, self._checked(opcode, bytes(payload))
            self._opcode = opcode
            parts = self._parts = bytearray()
            self.active = True
        elif parts is None:
            raise FrameError(1002, "a continuation frame with no message to continue")
        parts += payload
        if self.max_size is not None and len(parts) > self.max_size:
            raise FrameError(1009, f"a fragmented message above the limit of {self.max_size} bytes")
        if not fin:
            return None
        self._parts = None
        self.active = False
        return self._opcode, self._checked(self._opcode, bytes(parts))

    @staticmethod
    def _checked(opcode: int, message: bytes) -> bytes:
        if opcode == OP_TEXT:
            try:
                message.decode()
            except UnicodeDecodeError:
                raise FrameError(1007, "a text message that is not UTF-8") from None
        return message


class FrameReader:
    """A resumable frame parser over a buffer of its own: :meth:`feed` bytes, take frames.

    Args:
        masked: whether frames must be masked (a server's reader) or must not be.
        max_size: the largest frame payload accepted (None: any).
    """

    __slots__ = ("_pos", "buffer", "masked", "max_size")

    def __init__(self, *, masked: bool, max_size: int | None = None) -> None:
        self.masked = masked
        self.max_size = max_size
        #: Bytes fed and not yet taken as frames start at this offset of :attr:`buffer`.
        self.buffer = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        self.buffer += data

    @property
    def pending(self) -> int:
        """Bytes fed and not yet taken as frames."""
        return len(self.buffer) - self._pos

    def take(self) -> bytes:
        """Remove and return what is buffered (the bytes after the last frame taken)."""
        rest = bytes(self.buffer[self._pos :])
        self.buffer.clear()
        self._pos = 0
        return rest

    def next_frame(self) -> Frame | None:
        """The next whole frame, unmasked, or None until more bytes are fed.

        Raises:
            FrameError: the frame breaks RFC 6455 or the size limit (the
                reader is then of no further use).
        """
        buf = self.buffer
        pos = self._pos
        head = parse_head(buf, pos, len(buf), self.masked, self.max_size)
        if head is None or head[2] > len(buf):
            if pos:
                del buf[:pos]
                self._pos = 0
            return None
        first, start, stop = head
        with memoryview(buf) as view:  # one copy of the payload, not two
            if self.masked:
                payload = apply_mask(view[start:stop], view[start - 4 : start])
            else:
                payload = bytes(view[start:stop])
        self._pos = stop
        # tuple.__new__: a NamedTuple's own __new__ is a Python function, slower by half.
        return tuple.__new__(Frame, (first > 0x7F, first & 0x0F, payload, (first >> 4) & 7))
