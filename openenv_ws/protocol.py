"""Protocol v1, sans-I/O: typed frames, encode/decode, error codes, session states.

Bytes in, frames out, and back. Nothing here touches a socket or an event
loop, so the same code serves the server, every client and the HTTP fallback.
``protocol/SPEC.md`` is the normative description of what this module does.

Example::

    >>> data = encode(Step(id=7, action=3))
    >>> decode_client_frame(data)
    Step(id=7, action=3, obs=True)
"""

from __future__ import annotations

import enum
import functools
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple, TypeAlias

import msgpack
import numpy as np

from ._arrays import EXT_NDARRAY, array_ext_parts, array_ext_payload, decode_array
from ._brief import brief
from ._palette import PALETTE_BYTES
from ._shm import EXT_SHARED, ClientRegion, SharedArray
from .errors import InvalidState, OpenEnvError, PayloadTooBig, ProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_SERVER_FRAME_SIZE",
    "ERRORS",
    "MAX_DEPTH",
    "MAX_ERROR_MESSAGE",
    "MAX_ID",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "WS_PATH",
    "ClientFrame",
    "Close",
    "Closed",
    "Error",
    "ErrorInfo",
    "GetState",
    "Open",
    "Opened",
    "Reset",
    "Restore",
    "Result",
    "ServerFrame",
    "SessionMachine",
    "SessionState",
    "Snapshot",
    "SnapshotData",
    "StateReply",
    "Step",
    "client_frame_from_map",
    "decode_client_frame",
    "decode_server_frame",
    "encode",
    "encode_result",
    "encode_step",
    "error_code_of",
    "error_frame",
    "frame_fields",
    "native_wire",
    "parse_step",
    "server_frame_from_map",
    "shared_ext_hook",
]

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
#: Path of the session WebSocket endpoint.
WS_PATH = "/ws"
#: Largest client frame a server accepts unless configured otherwise (1 MiB).
DEFAULT_MAX_FRAME_SIZE = 1 << 20
#: Largest server frame a client accepts unless configured otherwise (64 MiB).
DEFAULT_MAX_SERVER_FRAME_SIZE = 64 << 20
#: Request ids are unsigned 32-bit integers.
MAX_ID = 0xFFFFFFFF
#: How many levels of lists/maps a free-form value (config, options, action,
#: spec, info, state) may nest, the value itself counting as level 1.
MAX_DEPTH = 8

# --------------------------------------------------------------------------- errors


class ErrorInfo(NamedTuple):
    """What an error code means on the wire."""

    fatal: bool
    close_code: int | None
    meaning: str


#: Every stable error code: whether it ends the session and with which close code.
ERRORS: dict[str, ErrorInfo] = {
    "bad_frame": ErrorInfo(True, 1002, "the frame is not MessagePack or has no valid op/id"),
    "text_frame": ErrorInfo(True, 1003, "a text message was sent; frames are binary"),
    "too_big": ErrorInfo(True, 1009, "the frame is larger than the receiver's limit"),
    "unsupported_version": ErrorInfo(True, 1002, "the server does not speak that version"),
    "auth": ErrorInfo(True, 1008, "missing or wrong credentials"),
    "capacity": ErrorInfo(True, 1013, "the server hosts its maximum number of sessions"),
    "idle_timeout": ErrorInfo(True, 1001, "no request arrived within the idle timeout"),
    "shutting_down": ErrorInfo(True, 1001, "the server is draining and closes sessions"),
    "resume_failed": ErrorInfo(True, 1008, "the resume token is unknown or expired"),
    "internal": ErrorInfo(True, 1011, "the environment failed; the session is lost"),
    "step_timeout": ErrorInfo(True, 1011, "an environment call missed the server's deadline"),
    "bad_request": ErrorInfo(False, None, "a field is missing or has the wrong type"),
    "unknown_op": ErrorInfo(False, None, "the op is not one this server knows"),
    "not_open": ErrorInfo(False, None, "the op needs an open session; send open first"),
    "already_open": ErrorInfo(False, None, "open was sent twice on one connection"),
    "bad_config": ErrorInfo(False, None, "the environment configuration was refused"),
    "not_reset": ErrorInfo(False, None, "step/snapshot before the first reset"),
    "episode_over": ErrorInfo(False, None, "step after the episode ended; reset first"),
    "invalid_action": ErrorInfo(False, None, "the action is outside the action space"),
    "unsupported": ErrorInfo(False, None, "the environment does not support this op"),
    "bad_snapshot": ErrorInfo(False, None, "the environment cannot restore those snapshot bytes"),
}


def error_code_of(exc: BaseException) -> str:
    """The wire error code for an exception raised while serving a request."""
    if isinstance(exc, OpenEnvError) and exc.code in ERRORS:
        return exc.code
    return "internal"


# --------------------------------------------------------------------------- frames


@dataclass(slots=True)
class _Frame:
    OP: ClassVar[str] = ""
    id: int


# Client -> server ---------------------------------------------------------------


@dataclass(slots=True)
class Open(_Frame):
    """Start the session: protocol version and environment configuration."""

    OP: ClassVar[str] = "open"
    version: int = PROTOCOL_VERSION
    config: dict[str, Any] = field(default_factory=dict)
    token: str | None = None
    resume: str | None = None
    palette: bool = False


@dataclass(slots=True)
class Reset(_Frame):
    """Start a new episode."""

    OP: ClassVar[str] = "reset"
    seed: int | None = None
    episode_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Step(_Frame):
    """Advance the episode by one agent step; ``obs=False`` leaves the observation out."""

    OP: ClassVar[str] = "step"
    action: Any = 0
    obs: bool = True


@dataclass(slots=True)
class GetState(_Frame):
    """Ask for the episode state (episode id, step count, configuration)."""

    OP: ClassVar[str] = "state"


@dataclass(slots=True)
class Snapshot(_Frame):
    """Ask for an opaque snapshot of the running episode."""

    OP: ClassVar[str] = "snapshot"


@dataclass(slots=True)
class Restore(_Frame):
    """Continue from a snapshot taken earlier in this session (or one like it)."""

    OP: ClassVar[str] = "restore"
    snapshot: bytes = b""


@dataclass(slots=True)
class Close(_Frame):
    """End the session; the server answers ``closed`` and closes the socket."""

    OP: ClassVar[str] = "close"


# Server -> client ---------------------------------------------------------------


@dataclass(slots=True)
class Opened(_Frame):
    """The session is open: its id, the negotiated version and the env spec."""

    OP: ClassVar[str] = "opened"
    session_id: str = ""
    version: int = PROTOCOL_VERSION
    spec: dict[str, Any] = field(default_factory=dict)
    resume_token: str | None = None
    palette: bytes | None = None


@dataclass(slots=True)
class Result(_Frame):
    """The outcome of reset, step or restore."""

    OP: ClassVar[str] = "result"
    obs: np.ndarray[Any, Any] | None = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StateReply(_Frame):
    """The episode state."""

    OP: ClassVar[str] = "state"
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SnapshotData(_Frame):
    """An opaque snapshot to pass back in ``restore``."""

    OP: ClassVar[str] = "snapshot"
    snapshot: bytes = b""


@dataclass(slots=True)
class Closed(_Frame):
    """The session is closed; the socket closes next with code 1000."""

    OP: ClassVar[str] = "closed"


@dataclass(slots=True)
class Error(_Frame):
    """A request failed. ``id`` is None when the request's id could not be read."""

    OP: ClassVar[str] = "error"
    id: int | None  # type: ignore[assignment]
    code: str = "internal"
    message: str = ""
    fatal: bool = True


ClientFrame: TypeAlias = Open | Reset | Step | GetState | Snapshot | Restore | Close
ServerFrame: TypeAlias = Opened | Result | StateReply | SnapshotData | Closed | Error


#: Longest error message a server sends, in characters; longer ones are cut.
MAX_ERROR_MESSAGE = 1000


def error_frame(request_id: int | None, code: str, message: str) -> Error:
    """An error frame whose ``fatal`` flag follows the code's entry in :data:`ERRORS`.

    A message above :data:`MAX_ERROR_MESSAGE` characters is cut (values it
    echoes should already be short, see :func:`~openenv_ws.errors.brief`):
    an error reply never grows with what the peer sent.
    """
    info = ERRORS.get(code, ERRORS["internal"])
    if len(message) > MAX_ERROR_MESSAGE:
        message = f"{message[: MAX_ERROR_MESSAGE - 40]}... (cut from {len(message)} characters)"
    return Error(id=request_id, code=code, message=message, fatal=info.fatal)


# --------------------------------------------------------------------------- encode


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


def _thread_pack() -> Callable[[Any], bytes]:
    pack: Callable[[Any], bytes] | None = getattr(_packers, "pack", None)
    if pack is None:
        pack = _packers.pack = msgpack.Packer(default=_default, use_bin_type=True).pack
    return pack


_NIL, _FALSE, _TRUE = b"\xc0", b"\xc2", b"\xc3"
_FLOAT64 = struct.Struct(">Bd")


def _float64(value: Any) -> bytes:
    """A float field: always float64, never NaN."""
    if type(value) is not float:
        if type(value) is bool or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ProtocolError(f"it must be a number, got {type(value).__name__}")
        value = float(value)
    if value != value:
        raise ProtocolError("it is NaN; send a number")
    return _FLOAT64.pack(0xCB, value)


class _Layout(NamedTuple):
    """Precomputed bytes of one frame class: everything up to the id, then each key."""

    prefix: bytes
    fields: tuple[tuple[str, bytes, bool], ...]  # (name, packed key, is a float field)


def _layout(cls: type[_Frame]) -> _Layout:
    names = [f.name for f in fields(cls) if f.name != "id"]
    pack = msgpack.packb
    prefix = bytes([0x80 | len(names) + 2]) + pack("op") + pack(cls.OP) + pack("id")
    floats = {f.name for f in fields(cls) if f.type in ("float", float)}
    return _Layout(prefix, tuple((n, pack(n), n in floats) for n in names))


_LAYOUTS: dict[type[_Frame], _Layout] = {}


def encode(frame: ClientFrame | ServerFrame) -> bytes:
    """Encode a frame in the canonical form of ``protocol/SPEC.md``.

    One MessagePack map: ``op``, ``id``, then every field of the frame in
    declaration order (absent values as nil); integers in their smallest form,
    float fields as float64. Top-level arrays are spliced in with a single
    copy of their element bytes.

    Raises:
        ProtocolError: a value that protocol v1 cannot carry: an id outside
            0..2**32-1, a NaN reward, an integer outside 64 bits, an array of a
            dtype outside the table, or an object MessagePack cannot hold.
    """
    cls = type(frame)
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = _layout(cls)
    rid = frame.id
    if (type(rid) is not int or not 0 <= rid <= MAX_ID) and not (rid is None and cls is Error):
        raise ProtocolError(f"frame id must be an integer in 0..{MAX_ID}, got {rid!r}")
    pack = _thread_pack()
    parts: list[bytes | memoryview] = [layout.prefix, _NIL if rid is None else pack(rid)]
    append = parts.append
    try:
        for name, key, is_float in layout.fields:
            value = getattr(frame, name)
            append(key)
            if is_float:
                append(_float64(value))
            elif value is None:
                append(_NIL)
            elif value is True:
                append(_TRUE)
            elif value is False:
                append(_FALSE)
            elif type(value) is np.ndarray:
                head, data = array_ext_parts(value)
                append(head)
                append(data)
            elif type(value) is SharedArray:
                append(pack(value.ext()))
            else:
                append(pack(value))
    except (ProtocolError, TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(
            f"field '{name}' of a '{cls.OP}' frame cannot be encoded: {exc}"
        ) from None
    return b"".join(parts)


# The frames of the step loop, encoded without building a frame object first.
# Same bytes as encode(); values outside the plain types go through encode().
_STEP_LAYOUT = _LAYOUTS[Step] = _layout(Step)
_RESULT_LAYOUT = _LAYOUTS[Result] = _layout(Result)
_STEP_KEYS = tuple(key for _, key, _ in _STEP_LAYOUT.fields)
_RESULT_KEYS = tuple(key for _, key, _ in _RESULT_LAYOUT.fields)
_BOOLS = (_FALSE, _TRUE)

#: The C reader of result frames (``openenv_ws/_wire.c``), given this module's
#: layout; None where the package was installed without a C compiler.
native_wire: Any
try:
    from . import _wire as native_wire  # type: ignore[attr-defined, no-redef]
except ImportError:
    native_wire = None
else:
    native_wire.configure("result", _RESULT_LAYOUT.prefix, _RESULT_KEYS)
    native_wire.configure("step", _STEP_LAYOUT.prefix, _STEP_KEYS)


def encode_step(rid: int, action: Any, obs: bool = True) -> bytes:
    """``encode(Step(id=rid, action=action, obs=obs))``, faster for integer actions."""
    if type(action) is int and type(rid) is int and 0 <= rid <= MAX_ID and type(obs) is bool:
        pack = _thread_pack()
        try:
            packed = pack(action)
        except (OverflowError, ProtocolError):
            return encode(Step(id=rid, action=action, obs=obs))  # says which field and why
        k_action, k_obs = _STEP_KEYS
        return b"".join((_STEP_LAYOUT.prefix, pack(rid), k_action, packed, k_obs, _BOOLS[obs]))
    return encode(Step(id=rid, action=action, obs=obs))


_STEP_TAIL = len(_STEP_KEYS[0]) + 1 + len(_STEP_KEYS[1]) + 1
_RID_WIDTHS = {0xCC: 1, 0xCD: 2, 0xCE: 4}


def parse_step(data: bytes) -> tuple[int, int, bool] | None:
    """``(id, action, obs)`` of a step frame laid out as :func:`encode_step` lays it out,
    with an action in 0..127; None for any other frame (decode it in full).

    The session's step loop reads its requests this way: the bytes are
    checked as exactly that MessagePack map, so anything this accepts
    :func:`decode_client_frame` decodes to the same ``Step``.
    ``native_wire.parse_step`` (C, where built) accepts exactly the same bytes.
    """
    prefix = _STEP_LAYOUT.prefix
    if type(data) is not bytes or not data.startswith(prefix):
        return None
    at = len(prefix)
    if len(data) <= at:
        return None
    first = data[at]
    if first < 0x80:
        rid = first
        at += 1
    else:
        width = _RID_WIDTHS.get(first)
        if width is None:
            return None
        rid = int.from_bytes(data[at + 1 : at + 1 + width], "big")
        at += 1 + width
    k_action, k_obs = _STEP_KEYS
    split = at + len(k_action)
    if (
        len(data) != at + _STEP_TAIL
        or data[at:split] != k_action
        or data[split] >= 0x80
        or data[split + 1 : -1] != k_obs
        or data[-1] not in (0xC2, 0xC3)
    ):
        return None
    return rid, data[split], data[-1] == 0xC3


@functools.lru_cache(maxsize=64)
def _packed_shared(arr: SharedArray) -> bytes:
    # A session names one of the same two arrays on every step.
    packed: bytes = msgpack.packb(arr.ext())
    return packed


# The reward key and value in one pack; terminated, truncated and done with their
# keys and the info key, for each of the eight combinations.
_REWARD = struct.Struct(f">{len(_RESULT_KEYS[1])}sBd")
_RESULT_FLAGS = tuple(
    b"".join(
        (
            _RESULT_KEYS[2],
            _BOOLS[flags >> 2 & 1],
            _RESULT_KEYS[3],
            _BOOLS[flags >> 1 & 1],
            _RESULT_KEYS[4],
            _BOOLS[flags & 1],
            _RESULT_KEYS[5],
        )
    )
    for flags in range(8)
)


def encode_result(
    rid: int,
    obs: Any,
    reward: float,
    terminated: bool,
    truncated: bool,
    done: bool,
    info: dict[str, Any],
) -> bytes:
    """``encode(Result(...))`` of these fields, faster for the usual types.

    Written in C (``openenv_ws/_wire.c``, where built) for an observation in
    the shared region or none; in Python otherwise, and for anything the C
    writer leaves to it (same bytes).
    """
    if native_wire is not None:
        try:
            packed_obs = (
                _NIL if obs is None else _packed_shared(obs) if type(obs) is SharedArray else None
            )
        except (ProtocolError, TypeError, ValueError, OverflowError):
            packed_obs = None  # the Python encoder says what is wrong
        if packed_obs is not None:
            out: bytes | None = native_wire.pack_result(
                rid, packed_obs, b"", reward, terminated, truncated, done, info
            )
            if out is not None:
                return out
    if (
        type(rid) is int
        and 0 <= rid <= MAX_ID
        and type(reward) is float
        and reward == reward
        and type(terminated) is bool
        and type(truncated) is bool
        and type(done) is bool
        and type(info) is dict
    ):
        pack = _thread_pack()
        kind = type(obs)
        head: bytes
        data: bytes | memoryview
        try:
            if kind is SharedArray:
                head, data = _packed_shared(obs), b""
            elif kind is np.ndarray:
                head, data = array_ext_parts(obs)
            elif obs is None:
                head, data = _NIL, b""
            else:
                head = b""
            if head:
                return b"".join(
                    (
                        _RESULT_LAYOUT.prefix,
                        pack(rid),
                        _RESULT_KEYS[0],
                        head,
                        data,
                        _REWARD.pack(_RESULT_KEYS[1], 0xCB, reward),
                        _RESULT_FLAGS[terminated << 2 | truncated << 1 | done],
                        pack(info),
                    )
                )
        except (ProtocolError, TypeError, ValueError, OverflowError):
            pass  # encode() says which field and why
    return encode(Result(rid, obs, reward, terminated, truncated, done, info))


# --------------------------------------------------------------------------- decode

_Check = Callable[[str, Any], Any]
_SCALARS = frozenset({type(None), bool, int, float, str, bytes, np.ndarray})


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


def _uint(name: str, v: Any) -> int:
    if type(v) is not int or v < 0:
        raise _bad(name, "a non-negative integer", v)
    return v


def _uint32(name: str, v: Any) -> int:
    if type(v) is not int or not 0 <= v <= MAX_ID:
        raise _bad(name, f"an integer in 0..{MAX_ID}", v)
    return v


def _opt_uint(name: str, v: Any) -> int | None:
    return None if v is None else _uint(name, v)


def _bool(name: str, v: Any) -> bool:
    if type(v) is not bool:
        raise _bad(name, "a boolean", v)
    return v


def _str(name: str, v: Any) -> str:
    if type(v) is not str:
        raise _bad(name, "a string", v)
    return v


def _opt_str(name: str, v: Any) -> str | None:
    return None if v is None else _str(name, v)


def _bytes(name: str, v: Any) -> bytes:
    if type(v) is not bytes:
        raise _bad(name, "binary data", v)
    return v


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


def _opt_array(name: str, v: Any) -> np.ndarray[Any, Any] | None:
    if v is None or type(v) is np.ndarray:
        return v
    raise _bad(name, "an array (ext type 1) or nil", v)


def _plain(name: str, v: list[Any] | dict[Any, Any], depth: int) -> None:
    """Check a free-form container: string keys, plain values, at most MAX_DEPTH levels."""
    if depth > MAX_DEPTH:
        raise ProtocolError(
            f"field '{name}' nests lists/maps deeper than {MAX_DEPTH} levels", code="bad_request"
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
            _plain(name, item, depth + 1)
        else:
            raise _bad(name, "made of nil, bool, number, string, binary, array, list and map", item)


def _map(name: str, v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise _bad(name, "a map", v)
    _plain(name, v, 1)
    return v


def _map_or_nil(name: str, v: Any) -> dict[str, Any]:
    return {} if v is None else _map(name, v)


def _action(name: str, v: Any) -> Any:
    kind = type(v)
    if kind is int or kind is float or kind is np.ndarray:
        return v
    if kind is list or kind is dict:
        _plain(name, v, 1)
        return v
    raise _bad(name, "an integer, a number, an array, a list or a map", v)


def _reward(name: str, v: Any) -> float:
    if type(v) is float:
        if v != v:
            raise _bad(name, "a number (not NaN)", v)
        return v
    if type(v) is int:
        return float(v)
    raise _bad(name, "a number", v)


def _foreign(value: Any) -> bool:
    """Whether an ignored value holds something no v1 frame may carry."""
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


# Per frame class, in wire order: (field name, check, required). Absent
# optional fields take the dataclass default.
_SCHEMAS: dict[type[_Frame], tuple[tuple[str, _Check, bool], ...]] = {
    Open: (
        ("version", _uint32, True),
        ("config", _map_or_nil, False),
        ("token", _opt_str, False),
        ("resume", _opt_str, False),
        ("palette", _bool, False),
    ),
    Reset: (
        ("seed", _opt_uint, False),
        ("episode_id", _opt_str, False),
        ("options", _map_or_nil, False),
    ),
    Step: (("action", _action, True), ("obs", _bool, False)),
    GetState: (),
    Snapshot: (),
    Restore: (("snapshot", _bytes, True),),
    Close: (),
    Opened: (
        ("session_id", _str, True),
        ("version", _uint32, True),
        ("spec", _map, True),
        ("resume_token", _opt_str, False),
        ("palette", _opt_palette, False),
    ),
    Result: (
        ("obs", _opt_array, False),
        ("reward", _reward, True),
        ("terminated", _bool, True),
        ("truncated", _bool, True),
        ("done", _bool, True),
        ("info", _map_or_nil, False),
    ),
    StateReply: (("state", _map, True),),
    SnapshotData: (("snapshot", _bytes, True),),
    Closed: (),
    Error: (("code", _str, True), ("message", _str, True), ("fatal", _bool, True)),
}
_CLIENT_OPS: dict[str, type[_Frame]] = {
    c.OP: c for c in (Open, Reset, Step, GetState, Snapshot, Restore, Close)
}
_SERVER_OPS: dict[str, type[_Frame]] = {
    c.OP: c for c in (Opened, Result, StateReply, SnapshotData, Closed, Error)
}
_MISSING: Any = object()


# Fast paths for the frames of the step loop. They accept exactly what the
# generic schema walk accepts when every field is present and well-typed, and
# return None otherwise so the walk produces the precise error.
def _fast_result(raw: dict[Any, Any], rid: int) -> Result | None:
    obs = raw.get("obs")
    reward = raw.get("reward")
    terminated = raw.get("terminated")
    truncated = raw.get("truncated")
    done = raw.get("done")
    info = raw.get("info")
    if (
        len(raw) == 8
        and (obs is None or type(obs) is np.ndarray)
        and type(reward) is float
        and reward == reward  # not NaN
        and type(terminated) is bool
        and type(truncated) is bool
        and type(done) is bool
        and type(info) is dict
    ):
        _plain("info", info, 1)
        return Result(rid, obs, reward, terminated, truncated, done, info)
    return None


def _fast_step(raw: dict[Any, Any], rid: int) -> Step | None:
    action = raw.get("action")
    obs = raw.get("obs")
    if len(raw) == 4 and type(action) is int and type(obs) is bool:
        return Step(rid, action, obs)
    return None


_FAST: dict[type[_Frame], Callable[[dict[Any, Any], Any], Any]] = {
    Result: _fast_result,
    Step: _fast_step,
}


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_NDARRAY:
        return decode_array(data)
    if code == EXT_SHARED:
        raise ProtocolError(
            "MessagePack extension type 2 (an array in shared memory) is only valid in "
            "server results on a connection that set up a shared region (SPEC section 17)"
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
        return _ext_hook(code, data)

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


def _unpack(
    data: bytes | bytearray | memoryview,
    max_frame_size: int,
    ext_hook: Callable[[int, bytes], Any] = _ext_hook,
) -> dict[Any, Any]:
    size = data.nbytes if type(data) is memoryview else len(data)
    if size > max_frame_size:
        raise PayloadTooBig(size, max_frame_size)
    try:
        obj = msgpack.unpackb(data, ext_hook=ext_hook, raw=False, strict_map_key=True)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a bad frame, never another error
        raise _unreadable(exc) from None
    if type(obj) is not dict:
        raise ProtocolError(f"frame must be a MessagePack map, got {type(obj).__name__}")
    return obj


def _decode(
    data: bytes | bytearray | memoryview, ops: dict[str, type[_Frame]], max_frame_size: int
) -> Any:
    return _from_map(_unpack(data, max_frame_size), ops)


def _from_map(raw: dict[Any, Any], ops: dict[str, type[_Frame]]) -> Any:
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
        fast = _FAST.get(cls)
        if fast is not None:
            frame = fast(raw, rid)
            if frame is not None:
                return frame
        values: dict[str, Any] = {"id": rid}
        seen = 2
        for name, check, required in _SCHEMAS[cls]:
            value = raw.get(name, _MISSING)
            if value is not _MISSING:
                values[name] = check(name, value)
                seen += 1
            elif required:
                raise ProtocolError(f"op '{op}' needs field '{name}'", code="bad_request")
        if len(raw) != seen and any(_foreign(v) or type(k) is not str for k, v in raw.items()):
            raise ProtocolError(
                "an unknown field holds a non-string map key or an extension type other than 1"
            )
    except ProtocolError as err:
        err.request_id = rid
        raise
    return cls(**values)


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
    frame: ClientFrame = _decode(data, _CLIENT_OPS, max_frame_size)
    return frame


def decode_server_frame(
    data: bytes | bytearray | memoryview,
    *,
    max_frame_size: int = DEFAULT_MAX_SERVER_FRAME_SIZE,
    ext_hook: Callable[[int, bytes], Any] = _ext_hook,
) -> ServerFrame:
    """Decode a frame sent by a server (same errors as :func:`decode_client_frame`).

    `ext_hook` is :func:`shared_ext_hook` of the connection's shared region,
    if it has one: arrays in shared memory (ext type 2) are then copied out.
    """
    frame: ServerFrame = _from_map(_unpack(data, max_frame_size, ext_hook), _SERVER_OPS)
    return frame


def client_frame_from_map(raw: dict[str, Any]) -> ClientFrame:
    """Build a client frame from an already decoded envelope map (e.g. a JSON view).

    The map holds what the MessagePack map of the frame holds (``op``, ``id``
    and the fields, arrays as numpy arrays, bin as bytes) and goes through
    the checks of :func:`decode_client_frame`, with the same errors.
    """
    if type(raw) is not dict:
        raise ProtocolError(f"frame must be a map, got {type(raw).__name__}")
    frame: ClientFrame = _from_map(raw, _CLIENT_OPS)
    return frame


def server_frame_from_map(raw: dict[str, Any]) -> ServerFrame:
    """Build a server frame from an already decoded envelope map (see :func:`client_frame_from_map`)."""
    if type(raw) is not dict:
        raise ProtocolError(f"frame must be a map, got {type(raw).__name__}")
    frame: ServerFrame = _from_map(raw, _SERVER_OPS)
    return frame


# --------------------------------------------------------------------------- session states


class SessionState(enum.Enum):
    """Where a session is in its life; see the state table in ``protocol/SPEC.md``."""

    CONNECTED = "connected"  # socket up, no open yet
    OPEN = "open"  # environment created, no episode yet
    RUNNING = "running"  # an episode is in progress
    ENDED = "ended"  # the episode terminated or was truncated
    CLOSED = "closed"  # close was served or the socket is gone


_S = SessionState
# (state, op) -> error code; absent pairs are allowed.
_REFUSED: dict[tuple[SessionState, str], str] = {
    **{(_S.CONNECTED, op): "not_open" for op in ("reset", "step", "state", "snapshot", "restore")},
    **{(s, "open"): "already_open" for s in (_S.OPEN, _S.RUNNING, _S.ENDED)},
    (_S.OPEN, "step"): "not_reset",
    (_S.OPEN, "snapshot"): "not_reset",
    (_S.ENDED, "step"): "episode_over",
}
_AFTER: dict[str, SessionState] = {
    "open": _S.OPEN,
    "reset": _S.RUNNING,
    "restore": _S.RUNNING,
    "close": _S.CLOSED,
}
_WHY = {
    "not_open": "send 'open' with the environment configuration first",
    "already_open": "this connection already holds a session; open a new connection for another",
    "not_reset": "call reset() to start an episode first",
    "episode_over": "the episode has ended (terminated or truncated); call reset() to start a new one",
}


class SessionMachine:
    """The session state machine shared by the server and the clients."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = SessionState.CONNECTED

    def check(self, op: str) -> None:
        """Raise :class:`InvalidState` if `op` is not allowed in the current state."""
        if self.state is _S.CLOSED:
            raise InvalidState(f"'{op}' on a closed session; open a new session", code="closed")
        code = _REFUSED.get((self.state, op))
        if code is not None:
            raise InvalidState(
                f"'{op}' is not allowed while the session is {self.state.value}: {_WHY[code]}",
                code=code,
            )

    def served(self, op: str, *, done: bool = False) -> None:
        """Record that `op` was served; ``done`` marks a step/restore that ended the episode."""
        after = _AFTER.get(op)
        if after is not None:
            self.state = after
        if done and self.state is _S.RUNNING:
            self.state = _S.ENDED

    def closed(self) -> None:
        """Record that the session ended (close served, fatal error, or socket gone)."""
        self.state = _S.CLOSED


def frame_fields(frame: ClientFrame | ServerFrame) -> Mapping[str, Any]:
    """The frame as a plain mapping (``op`` first), e.g. for JSON views and logs."""
    out: dict[str, Any] = {"op": frame.OP, "id": frame.id}
    for name in frame.__slots__:
        out[name] = getattr(frame, name)
    return out
