"""The session state machine shared by the server and the clients (``protocol/SPEC.md``)."""

from __future__ import annotations

import enum

from ..errors import InvalidState

__all__ = ["SessionMachine", "SessionState"]


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
