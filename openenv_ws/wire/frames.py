"""The typed frames of protocol v1: what a client sends, what a server answers.

Each frame is a dataclass whose ``OP`` names it on the wire and whose fields
are, in declaration order, the fields of its MessagePack map after ``op`` and
``id`` (``protocol/SPEC.md`` section 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

import numpy as np

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
    "error_frame",
    "frame_fields",
]


@dataclass(slots=True)
class Frame:
    """What every frame has: its op (a class constant) and its request id."""

    OP: ClassVar[str] = ""
    id: int


# Client -> server ---------------------------------------------------------------


@dataclass(slots=True)
class Open(Frame):
    """Start the session: protocol version and environment configuration."""

    OP: ClassVar[str] = "open"
    version: int = PROTOCOL_VERSION
    config: dict[str, Any] = field(default_factory=dict)
    token: str | None = None
    resume: str | None = None
    palette: bool = False
    compress: list[str] = field(default_factory=list)
    delta: bool = False
    num_envs: int | None = None
    batch_size: int | None = None
    structured: bool = False


@dataclass(slots=True)
class Reset(Frame):
    """Start a new episode."""

    OP: ClassVar[str] = "reset"
    seed: int | None = None
    episode_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Step(Frame):
    """Advance the episode by one agent step; ``obs=False`` leaves the observation out."""

    OP: ClassVar[str] = "step"
    action: Any = 0
    obs: bool = True


@dataclass(slots=True)
class Send(Frame):
    """Vector sessions: actions for the envs of the previous batch; the reply is the next batch.

    ``env_ids`` names the env of each action (exactly the previous batch's
    envs, any order); None means the previous batch's row order.
    """

    OP: ClassVar[str] = "send"
    action: Any = None
    env_ids: Any = None
    obs: bool = True


@dataclass(slots=True)
class GetState(Frame):
    """Ask for the episode state (episode id, step count, configuration)."""

    OP: ClassVar[str] = "state"


@dataclass(slots=True)
class Snapshot(Frame):
    """Ask for an opaque snapshot of the running episode."""

    OP: ClassVar[str] = "snapshot"


@dataclass(slots=True)
class Restore(Frame):
    """Continue from a snapshot taken earlier in this session (or one like it)."""

    OP: ClassVar[str] = "restore"
    snapshot: bytes = b""


@dataclass(slots=True)
class Close(Frame):
    """End the session; the server answers ``closed`` and closes the socket."""

    OP: ClassVar[str] = "close"


# Server -> client ---------------------------------------------------------------


def _rows(dtype: type[np.generic]) -> np.ndarray[Any, Any]:
    """An empty column of a ``batch`` (the default of a field the wire always carries)."""
    return np.zeros(0, dtype)


@dataclass(slots=True)
class Opened(Frame):
    """The session is open: its id, the negotiated version and the env spec."""

    OP: ClassVar[str] = "opened"
    session_id: str = ""
    version: int = PROTOCOL_VERSION
    spec: dict[str, Any] = field(default_factory=dict)
    resume_token: str | None = None
    palette: bytes | None = None
    compress: str | None = None
    delta: bool = False


@dataclass(slots=True)
class Result(Frame):
    """The outcome of reset, step or restore."""

    OP: ClassVar[str] = "result"
    obs: Any = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Batch(Frame):
    """Vector sessions: the outcome of reset, step or send for B envs, one row each.

    ``env_id`` says which env each row is; ``info`` maps names to arrays
    with B rows (Gymnasium's vector layout).
    """

    OP: ClassVar[str] = "batch"
    obs: Any = None
    reward: np.ndarray[Any, Any] = field(default_factory=lambda: _rows(np.float64))
    terminated: np.ndarray[Any, Any] = field(default_factory=lambda: _rows(np.bool_))
    truncated: np.ndarray[Any, Any] = field(default_factory=lambda: _rows(np.bool_))
    env_id: np.ndarray[Any, Any] = field(default_factory=lambda: _rows(np.int32))
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StateReply(Frame):
    """The episode state."""

    OP: ClassVar[str] = "state"
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SnapshotData(Frame):
    """An opaque snapshot to pass back in ``restore``."""

    OP: ClassVar[str] = "snapshot"
    snapshot: bytes = b""


@dataclass(slots=True)
class Closed(Frame):
    """The session is closed; the socket closes next with code 1000."""

    OP: ClassVar[str] = "closed"


@dataclass(slots=True)
class Error(Frame):
    """A request failed. ``id`` is None when the request's id could not be read."""

    OP: ClassVar[str] = "error"
    id: int | None  # type: ignore[assignment]
    code: str = "internal"
    message: str = ""
    fatal: bool = True


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
