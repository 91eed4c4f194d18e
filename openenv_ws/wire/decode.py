"""The reference decoder: bytes (or an already decoded map) to a typed frame.

Every field is checked as :mod:`.frames` declares it; whatever is wrong
raises :class:`~openenv_ws.errors.ProtocolError` naming the field, with the
request's id when it could be read. The C readers of the step loop's frames
(:mod:`.native`) accept a subset of these bytes and give the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from .._arrays import EXT_NDARRAY, decode_array
from .._shm import EXT_SHARED, ClientRegion
from ..brief import brief
from ..errors import PayloadTooBig, ProtocolError
from .checks import Check, foreign
from .compress import EXT_COMPRESSED, ObsUnpacker
from .frames import CLIENT_OPS, SERVER_OPS, ClientFrame, Error, Frame, ServerFrame, wire_fields
from .limits import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_SERVER_FRAME_SIZE, MAX_ID

__all__ = [
    "client_frame_from_map",
    "compressed_ext_hook",
    "decode_client_frame",
    "decode_field",
    "decode_server_frame",
    "ext_hook",
    "server_frame_from_map",
    "shared_ext_hook",
]


def ext_hook(code: int, data: bytes) -> Any:
    """The MessagePack extension hook of protocol v1: arrays (ext type 1) only."""
    if code == EXT_NDARRAY:
        return decode_array(data)
    if code == EXT_SHARED:
        raise ProtocolError(
            "MessagePack extension type 2 (an array in shared memory) is only valid in "
            "server results on a connection that set up a shared region (SPEC section 17)"
        )
    if code == EXT_COMPRESSED:
        raise ProtocolError(
            "MessagePack extension type 3 (a compressed array) is only valid in server "
            "results of a session that negotiated compression (SPEC section 19)"
        )
    raise ProtocolError(f"MessagePack extension type {code} is not part of protocol v1")


def shared_ext_hook(
    region: ClientRegion, take: Callable[[np.ndarray[Any, Any]], Any] | None = None
) -> Callable[[int, bytes], Any]:
    """The extension hook for server frames on a connection with a shared region.

    `take` turns the array as it lies in the region into the decoded value
    and must not keep that view (the server writes there again); default: a
    read-only copy (:meth:`ClientRegion.read`).
    """
    read: Callable[[bytes], Any] = region.read
    if take is not None:
        view = region.view

        def read(data: bytes) -> Any:
            return take(view(data))

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_SHARED:
            return read(data)
        return ext_hook(code, data)

    return hook


def compressed_ext_hook(
    unpacker: ObsUnpacker, inner: Callable[[int, bytes], Any] = ext_hook
) -> Callable[[int, bytes], Any]:
    """The extension hook of a session that negotiated compression: compressed
    arrays (ext type 3) through `unpacker`, every other type through `inner`."""
    unpack = unpacker.unpack

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_COMPRESSED:
            return unpack(data)
        return inner(code, data)

    return hook


def _unreadable(exc: Exception) -> ProtocolError:
    """A ProtocolError naming why MessagePack could not decode a frame."""
    if isinstance(exc, msgpack.ExtraData):
        why = "it holds bytes after its MessagePack map; send one map per message"
    elif isinstance(exc, msgpack.StackError):
        why = "it nests deeper than 1024 levels"
    elif isinstance(exc, msgpack.FormatError):
        why = "it holds a byte that starts no MessagePack value (0xc1)"
    elif isinstance(exc, UnicodeDecodeError):
        why = f"a string is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    elif "incomplete input" in str(exc):
        why = "it is truncated (the MessagePack data ends early)"
    elif "map key" in str(exc):
        why = "a map key is not a string; keys are strings"
    elif "exceeds max" in str(exc):
        why = f"a length prefix is larger than the frame itself ({exc})"
    else:
        why = f"it is not valid MessagePack ({exc})"
    return ProtocolError(f"frame cannot be decoded: {why}")


def _unpackb(data: bytes | bytearray | memoryview, hook: Callable[[int, bytes], Any]) -> Any:
    """The MessagePack value in `data`; whatever the decoder refuses is a ProtocolError."""
    try:
        return msgpack.unpackb(data, ext_hook=hook, raw=False, strict_map_key=True)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a bad frame, never another error
        raise _unreadable(exc) from None


def _unpack(
    data: bytes | bytearray | memoryview,
    max_frame_size: int,
    hook: Callable[[int, bytes], Any] = ext_hook,
) -> dict[Any, Any]:
    size = data.nbytes if type(data) is memoryview else len(data)
    if size > max_frame_size:
        raise PayloadTooBig(size, max_frame_size)
    obj = _unpackb(data, hook)
    if type(obj) is not dict:
        raise ProtocolError(f"frame must be a MessagePack map, got {type(obj).__name__}")
    return obj


_MISSING: Any = object()
#: Per frame class, in wire order: (field name, check, required). Absent
#: optional fields take the declared default.
_SCHEMAS: dict[type[Frame], tuple[tuple[str, Check, bool], ...]] = {
    cls: tuple((f.name, f.kind.check, f.required) for f in wire_fields(cls))
    for cls in (*CLIENT_OPS.values(), *SERVER_OPS.values())
}


def _from_map(raw: dict[Any, Any], ops: dict[str, type[Frame]]) -> Any:
    op = raw.get("op")
    rid = raw.get("id")
    if type(op) is not str:
        raise ProtocolError("frame has no string field 'op'")
    cls = ops.get(op)
    if (type(rid) is not int or not 0 <= rid <= MAX_ID) and not (rid is None and cls is Error):
        raise ProtocolError(
            f"frame has no field 'id' holding an integer in 0..{MAX_ID}"
            + (" (nil is allowed in error frames only)" if rid is None and "id" in raw else "")
        )
    if cls is None:
        raise ProtocolError(
            f"op {brief(op)} is unknown; known ops: {', '.join(ops)}",
            code="unknown_op",
            request_id=rid,
        )
    try:
        # Fields in schema order go by position (cheaper); after an absent one, by name.
        args: list[Any] = [rid]
        named: dict[str, Any] | None = None
        for name, check, required in _SCHEMAS[cls]:
            value = raw.get(name, _MISSING)
            if value is not _MISSING:
                if named is None:
                    args.append(check(name, value))
                else:
                    named[name] = check(name, value)
            elif required:
                raise ProtocolError(f"op '{op}' needs field '{name}'", code="bad_request")
            elif named is None:
                named = {}
        seen = len(args) + 1 + (len(named) if named else 0)  # with op and id
        if len(raw) != seen and any(foreign(v) or type(k) is not str for k, v in raw.items()):
            raise ProtocolError(
                "an unknown field holds a non-string map key or an extension type other than 1"
            )
        frame = cls(*args) if named is None else cls(*args, **named)
        cross = cls.CROSS_CHECK
        if cross is not None:
            cross(frame)
    except ProtocolError as err:
        err.request_id = rid
        raise
    return frame


def decode_client_frame(
    data: bytes | bytearray | memoryview, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> ClientFrame:
    """Decode a frame sent by a client.

    Args:
        data: one complete binary WebSocket message.
        max_frame_size: frames longer than this many bytes are refused unread.

    Returns:
        The typed frame. Arrays in it are read-only (they view the decoded
        bytes without copying them again).

    Raises:
        PayloadTooBig: the frame is above ``max_frame_size`` (checked first).
        ProtocolError: anything else wrong; ``code`` is ``bad_frame`` (not
            decodable, or no valid op/id), ``unknown_op`` or ``bad_request``
            (a field is missing or wrong), and ``request_id`` holds the id
            when it could be read.
    """
    frame: ClientFrame = _from_map(_unpack(data, max_frame_size), CLIENT_OPS)
    return frame


def decode_server_frame(
    data: bytes | bytearray | memoryview,
    *,
    max_frame_size: int = DEFAULT_MAX_SERVER_FRAME_SIZE,
    ext_hook: Callable[[int, bytes], Any] = ext_hook,
) -> ServerFrame:
    """Decode a frame sent by a server (same errors as :func:`decode_client_frame`).

    `ext_hook` is :func:`shared_ext_hook` of the connection's shared region,
    if it has one: arrays in shared memory (ext type 2) are then copied out.
    """
    frame: ServerFrame = _from_map(_unpack(data, max_frame_size, ext_hook), SERVER_OPS)
    return frame


#: (frame class, field name) -> the check of that field.
_FIELD_CHECKS = {
    (cls, name): check for cls, fields in _SCHEMAS.items() for name, check, _ in fields
}


def decode_field(
    data: bytes,
    cls: type[Frame],
    name: str,
    rid: int,
    hook: Callable[[int, bytes], Any] = ext_hook,
) -> Any:
    """The value of field `name` of the `cls` frame `rid` from its MessagePack bytes
    alone (the C readers of :mod:`.native` hand over a structured field's bytes),
    decoded and checked as in a whole frame, with the same errors."""
    value = _unpackb(data, hook)
    try:
        return _FIELD_CHECKS[cls, name](name, value)
    except ProtocolError as err:
        err.request_id = rid
        raise


def client_frame_from_map(raw: dict[str, Any]) -> ClientFrame:
    """Build a client frame from an already decoded envelope map (e.g. a JSON view).

    The map holds what the MessagePack map of the frame holds (``op``, ``id``
    and the fields, arrays as numpy arrays, bin as bytes) and goes through
    the checks of :func:`decode_client_frame`, with the same errors.
    """
    if type(raw) is not dict:
        raise ProtocolError(f"frame must be a map, got {type(raw).__name__}")
    frame: ClientFrame = _from_map(raw, CLIENT_OPS)
    return frame


def server_frame_from_map(raw: dict[str, Any]) -> ServerFrame:
    """Build a server frame from an already decoded envelope map (see :func:`client_frame_from_map`)."""
    if type(raw) is not dict:
        raise ProtocolError(f"frame must be a map, got {type(raw).__name__}")
    frame: ServerFrame = _from_map(raw, SERVER_OPS)
    return frame
