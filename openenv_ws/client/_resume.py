"""When and how a client resumes its session after the connection dropped.

Sans-I/O policy shared by the sync and async clients. A session is resumed
when the connection ended without the server saying the session is over:
no close frame at all (reset, EOF: close code None or 1006), a heartbeat
timeout (1011 without an ``error`` frame: the server stopped hearing from
us) or a server restart (1012). A close the server chose (1000 after
``closed``, 1001 drain or idle, 1008, 1009, 1013, any close after a fatal
``error``) is final.

Resuming is: connect again to the same URL, send ``open`` with the session's
``resume_token``, then re-send the request that was in flight, byte for
byte (same id). The server answers a re-sent request it had already served
from its reply cache, so nothing is applied twice. The glue runs::

    attempt = Resumption(core, url, cause, resume_timeout)
    while True:
        try:
            connect (attempt.connect_timeout(...)), send attempt.open_frame(),
            attempt.opened(reply); re-send the request; return its reply
        except OpenEnvError as exc:
            sleep(attempt.retry_after(exc))   # raises when it is hopeless
"""

from __future__ import annotations

import time

from ..errors import (
    OpenEnvError,
    ProtocolError,
    RequestTimeout,
    ServerUnavailable,
    SessionClosed,
)
from ..protocol import PROTOCOL_VERSION, Open, Opened, ServerFrame
from ._core import ClientCore

__all__ = ["RESUMABLE_CLOSE_CODES", "Resumption", "can_resume"]

#: Close codes after which the session may still be waiting on the server.
RESUMABLE_CLOSE_CODES = frozenset({None, 1006, 1011, 1012})
#: A refused connection means nothing listens there any more: stop after this long.
_REFUSED_FOR = 1.0


def can_resume(core: ClientCore, cause: SessionClosed) -> bool:
    """Whether the drop described by `cause` leaves the session resumable."""
    return (
        core.resume_token is not None
        and core.closed_error is None
        and cause.close_code in RESUMABLE_CLOSE_CODES
    )


class Resumption:
    """One resume of one session: what to send, when to retry, when to give up.

    Back-off doubles from 50 ms up to 1 s, within `timeout` seconds. A
    refused connection means nothing listens at the URL any more (the server
    process is gone, and its sessions with it): refusals for more than a
    second end the attempts early.
    """

    def __init__(self, core: ClientCore, url: str, cause: SessionClosed, timeout: float) -> None:
        self.core = core
        self.url = url
        self.cause = cause
        self.deadline = time.monotonic() + timeout
        self.resumed = False  # the server gave the session back; the request is re-sent
        self._delay = 0.05
        self._first_refusal: float | None = None

    def connect_timeout(self, open_timeout: float | None) -> float:
        """Seconds the next connection attempt may take."""
        left = max(0.0, self.deadline - time.monotonic())
        return left if open_timeout is None else min(left, open_timeout)

    def open_frame(self) -> Open:
        """The ``open`` that asks the server for the session back."""
        core = self.core
        return Open(
            id=core.next_id(),
            version=PROTOCOL_VERSION,
            config=core.config,
            token=core.token,
            resume=core.resume_token,
        )

    def opened(self, frame: ServerFrame) -> None:
        """Check the answer to :meth:`open_frame` (raises what the server refused)."""
        core = self.core
        core.check(frame)
        if not isinstance(frame, Opened):
            raise ProtocolError(f"expected 'opened' in answer to 'open', got '{frame.OP}'")
        if frame.session_id != core.session_id:
            raise ProtocolError(
                f"the server resumed session {frame.session_id}, not {core.session_id}"
            )
        self.resumed = True

    def retry_after(self, exc: OpenEnvError) -> float:
        """Seconds to wait before trying again after `exc`; raises when it is hopeless."""
        core = self.core
        if self.resumed:
            # The session is back; what went wrong belongs to the re-sent request.
            if not isinstance(exc, SessionClosed):
                raise exc
            if core.closed_error is not None or not can_resume(core, exc):
                raise core.closed_error or exc
            self.resumed = False
        elif isinstance(exc, SessionClosed):
            if exc.close_code not in RESUMABLE_CLOSE_CODES:
                raise self.give_up(exc)
        elif not isinstance(exc, (ServerUnavailable, RequestTimeout)):
            raise self.give_up(exc)  # resume_failed, auth, a confused server
        refused = isinstance(exc, ServerUnavailable) and isinstance(
            exc.__context__, ConnectionRefusedError
        )
        now = time.monotonic()
        if not refused:
            self._first_refusal = None
        elif self._first_refusal is None:
            self._first_refusal = now
        if now >= self.deadline or (
            self._first_refusal is not None and now - self._first_refusal > _REFUSED_FOR
        ):
            raise self.give_up(exc)
        delay = min(self._delay, self.deadline - now)
        self._delay = min(self._delay * 2, 1.0)
        return delay

    def give_up(self, why: OpenEnvError) -> SessionClosed:
        """The error the user gets (now and on every later call): resuming is impossible."""
        cause = self.cause
        error = SessionClosed(
            cause.close_code,
            f"the connection to {self.url} dropped ({cause.reason or 'no reason given'}) "
            f"and the session could not be resumed: {why}; open a new session",
        )
        self.core.closed_error = error
        return error
