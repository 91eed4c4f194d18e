"""The typed frames of protocol v1: what a client sends, what a server answers.

Each frame is a dataclass whose ``OP`` names it on the wire and whose fields
are, in declaration order, the fields of its MessagePack map after ``op`` and
``id`` (``protocol/SPEC.md`` section 3). Each field is declared once, here,
with everything the codecs need: its kind of value (:mod:`.checks`), whether
a frame must carry it, and its default (what the constructor and the decoder
fill in when it is absent); a frame's cross check is named in its decorator.
The reference decoder, the encoder's layouts and the browser codec's tables
(``protocol/make_js.py``) are all made from :func:`wire_fields`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, NamedTuple, TypeAlias, TypeVar, dataclass_transform, overload

import numpy as np

from . import checks as k
from .checks import Kind
from .codes import ERRORS
from .limits import MAX_ERROR_MESSAGE, PROTOCOL_VERSION

__all__ = [
    "CLIENT_OPS",
    "SERVER_OPS",
    "Batch",
    "ClientFrame",
    "Close",
    "Closed",
    "Error",
    "Frame",
    "GetState",
    "Open",
    "Opened",
    "Reset",
    "Restore",
    "Result",
    "Send",
    "ServerFrame",
    "Snapshot",
    "SnapshotData",
    "StateReply",
    "Step",
    "WireField",
    "error_frame",
    "frame_fields",
    "wire_fields",
]

_T = TypeVar("_T")
# The key of a field's (kind, required) in its dataclass metadata.
_WIRE = "openenv_ws.wire"


@dataclass(slots=True)
class Frame:
    """What every frame has: its op (a class constant) and its request id."""

    OP: ClassVar[str] = ""
    #: The check across the frame's fields the decoder runs after each field's own.
    CROSS_CHECK: ClassVar[Callable[[Any], None] | None] = None
    id: int


@overload
def _wire(kind: Kind, *, default: _T, required: bool = False) -> _T: ...
@overload
def _wire(kind: Kind, *, default_factory: Callable[[], _T], required: bool = False) -> _T: ...
def _wire(
    kind: Kind, *, default: Any = MISSING, default_factory: Any = MISSING, required: bool = False
) -> Any:
    """A field of a frame: what it may hold, whether a frame must carry it, its default.

    A container default is made fresh for each frame (``default_factory``).
    """
    return field(
        default=default, default_factory=default_factory, metadata={_WIRE: (kind, required)}
    )


_F = TypeVar("_F", bound=Frame)


@dataclass_transform(field_specifiers=(_wire,))
def _frame(op: str, cross: Callable[[Any], None] | None = None) -> Callable[[type[_F]], type[_F]]:
    """Declare a frame class: its op on the wire and its cross check, if any."""

    def declare(cls: type[_F]) -> type[_F]:
        cls.OP = op
        cls.CROSS_CHECK = cross
        made = dataclass(slots=True)(cls)
        unchecked = [f.name for f in fields(made) if f.name != "id" and _WIRE not in f.metadata]
        if unchecked:
            raise TypeError(f"frame '{op}': fields {unchecked} are not declared with _wire()")
        return made

    return declare


class WireField(NamedTuple):
    """One field of a frame class as the codecs see it (see :func:`wire_fields`)."""

    name: str
    kind: Kind
    #: Whether a frame without it is refused (``bad_request``).
    required: bool
    #: What a frame holds when the field is absent (a fresh one on each call).
    default: Any


def wire_fields(cls: type[Frame]) -> tuple[WireField, ...]:
    """The fields of frame class `cls` after ``op`` and ``id``, in wire order."""
    out = []
    for f in fields(cls):
        if f.name == "id":
            continue
        kind, required = f.metadata[_WIRE]
        default = f.default if f.default_factory is MISSING else f.default_factory()
        out.append(WireField(f.name, kind, required, default))
    return tuple(out)


# Client -> server ---------------------------------------------------------------


@_frame("open", cross=k.open_sizes)
class Open(Frame):
    """Start the session: protocol version and environment configuration."""

    version: int = _wire(k.UINT32, default=PROTOCOL_VERSION, required=True)
    config: dict[str, Any] = _wire(k.MAP_OR_NIL, default_factory=dict)
    token: str | None = _wire(k.OPT_STR, default=None)
    resume: str | None = _wire(k.OPT_STR, default=None)
    palette: bool = _wire(k.BOOL, default=False)
    compress: list[str] = _wire(k.CODECS, default_factory=list)
    delta: bool = _wire(k.BOOL, default=False)
    num_envs: int | None = _wire(k.NUM_ENVS, default=None)
    batch_size: int | None = _wire(k.NUM_ENVS, default=None)
    structured: bool = _wire(k.BOOL, default=False)


@_frame("reset")
class Reset(Frame):
    """Start a new episode."""

    seed: int | None = _wire(k.OPT_UINT, default=None)
    episode_id: str | None = _wire(k.OPT_STR, default=None)
    options: dict[str, Any] = _wire(k.MAP_OR_NIL, default_factory=dict)


@_frame("step")
class Step(Frame):
    """Advance the episode by one agent step; ``obs=False`` leaves the observation out."""

    action: Any = _wire(k.ACTION, default=0, required=True)
    obs: bool = _wire(k.BOOL, default=True)


@_frame("send", cross=k.send_rows)
class Send(Frame):
    """Vector sessions: actions for the envs of the previous batch; the reply is the next batch.

    ``env_ids`` names the env of each action (exactly the previous batch's
    envs, any order); None means the previous batch's row order.
    """

    action: Any = _wire(k.ACTION_ROWS, default=None, required=True)
    env_ids: Any = _wire(k.OPT_INT_ROWS, default=None)
    obs: bool = _wire(k.BOOL, default=True)


@_frame("state")
class GetState(Frame):
    """Ask for the episode state (episode id, step count, configuration)."""


@_frame("snapshot")
class Snapshot(Frame):
    """Ask for an opaque snapshot of the running episode."""


@_frame("restore")
class Restore(Frame):
    """Continue from a snapshot taken earlier in this session (or one like it)."""

    snapshot: bytes = _wire(k.BIN, default=b"", required=True)


@_frame("close")
class Close(Frame):
    """End the session; the server answers ``closed`` and closes the socket."""


# Server -> client ---------------------------------------------------------------


def _rows(dtype: type[np.generic]) -> Callable[[], np.ndarray[Any, Any]]:
    """An empty column of a ``batch`` (the default of a field the wire always carries)."""
    return lambda: np.zeros(0, dtype)


@_frame("opened")
class Opened(Frame):
    """The session is open: its id, the negotiated version and the env spec."""

    session_id: str = _wire(k.STR, default="", required=True)
    version: int = _wire(k.UINT32, default=PROTOCOL_VERSION, required=True)
    spec: dict[str, Any] = _wire(k.SPEC, default_factory=dict, required=True)
    resume_token: str | None = _wire(k.OPT_STR, default=None)
    palette: bytes | None = _wire(k.OPT_PALETTE, default=None)
    compress: str | None = _wire(k.CODEC, default=None)
    delta: bool = _wire(k.BOOL, default=False)


@_frame("result")
class Result(Frame):
    """The outcome of reset, step or restore."""

    obs: Any = _wire(k.VALUE, default=None)
    reward: float = _wire(k.FLOAT, default=0.0, required=True)
    terminated: bool = _wire(k.BOOL, default=False, required=True)
    truncated: bool = _wire(k.BOOL, default=False, required=True)
    done: bool = _wire(k.BOOL, default=False, required=True)
    info: dict[str, Any] = _wire(k.MAP_OR_NIL, default_factory=dict)


@_frame("batch", cross=k.batch_rows)
class Batch(Frame):
    """Vector sessions: the outcome of reset, step or send for B envs, one row each.

    ``env_id`` says which env each row is; ``info`` maps names to arrays
    with B rows (Gymnasium's vector layout).
    """

    obs: Any = _wire(k.OPT_ARRAY, default=None)
    reward: np.ndarray[Any, Any] = _wire(
        k.FLOAT64_ROWS, default_factory=_rows(np.float64), required=True
    )
    terminated: np.ndarray[Any, Any] = _wire(
        k.BOOL_ROWS, default_factory=_rows(np.bool_), required=True
    )
    truncated: np.ndarray[Any, Any] = _wire(
        k.BOOL_ROWS, default_factory=_rows(np.bool_), required=True
    )
    env_id: np.ndarray[Any, Any] = _wire(
        k.INT32_ROWS, default_factory=_rows(np.int32), required=True
    )
    info: dict[str, Any] = _wire(k.MAP_OR_NIL, default_factory=dict)


@_frame("state")
class StateReply(Frame):
    """The episode state."""

    state: dict[str, Any] = _wire(k.MAP, default_factory=dict, required=True)


@_frame("snapshot")
class SnapshotData(Frame):
    """An opaque snapshot to pass back in ``restore``."""

    snapshot: bytes = _wire(k.BIN, default=b"", required=True)


@_frame("closed")
class Closed(Frame):
    """The session is closed; the socket closes next with code 1000."""


@_frame("error")
class Error(Frame):
    """A request failed. ``id`` is None when the request's id could not be read."""

    id: int | None  # type: ignore[assignment]
    code: str = _wire(k.STR, default="internal", required=True)
    message: str = _wire(k.STR, default="", required=True)
    fatal: bool = _wire(k.BOOL, default=True, required=True)


ClientFrame: TypeAlias = Open | Reset | Step | Send | GetState | Snapshot | Restore | Close
ServerFrame: TypeAlias = Opened | Result | Batch | StateReply | SnapshotData | Closed | Error

#: The frame class of each op a server reads, and of each op a client reads.
CLIENT_OPS: dict[str, type[Frame]] = {
    c.OP: c for c in (Open, Reset, Step, Send, GetState, Snapshot, Restore, Close)
}
SERVER_OPS: dict[str, type[Frame]] = {
    c.OP: c for c in (Opened, Result, Batch, StateReply, SnapshotData, Closed, Error)
}


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


def frame_fields(frame: ClientFrame | ServerFrame) -> Mapping[str, Any]:
    """The frame as a plain mapping (``op`` first), e.g. for JSON views and logs."""
    out: dict[str, Any] = {"op": frame.OP, "id": frame.id}
    for name in frame.__slots__:
        out[name] = getattr(frame, name)
    return out
