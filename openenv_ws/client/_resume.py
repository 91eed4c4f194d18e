"""When and how a client resumes its session after the connection dropped.

Sans-I/O, written once for the sync, async and vector clients. A session is
resumed when the connection ended without the server saying the session is
over: no close frame at all (reset, EOF: close code None or 1006), a
heartbeat timeout (1011 without an ``error`` frame: the server stopped
hearing from us) or a server restart (1012). A close the server chose (1000
after ``closed``, 1001 drain or idle, 1008, 1009, 1013, any close after a
fatal ``error``) is final.

Resuming is: connect again to the same URL, send ``open`` with the session's
``resume_token``, then re-send the request that was in flight, byte for
byte (same id). The server answers a re-sent request it had already served
from its reply cache, so nothing is applied twice.

:func:`resume` is that procedure as a generator of effects (:class:`Connect`,
:class:`Exchange`, :class:`Send`, :class:`Adopt`, :class:`Discard`,
:class:`Sleep`); a client performs each effect with its own I/O and sends the
outcome back, by :func:`run` (blocking) or :func:`run_async` (asyncio).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import OpenEnvError, RequestTimeout, ServerUnavailable, SessionClosed
from ..protocol import ServerFrame, encode
from ._core import ClientCore

__all__ = [
    "RESUMABLE_CLOSE_CODES",
    "Adopt",
    "Connect",
    "Discard",
    "Effect",
    "Exchange",
    "Resumption",
    "Send",
    "Settings",
    "Sleep",
    "can_resume",
    "resume",
    "run",
    "run_async",
]

logger = logging.getLogger("openenv_ws.client")

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


# Effects: what the procedure asks its client to do (the answer is sent back).


@dataclass(slots=True)
class Connect:
    """Open a new connection to the session's URL within `timeout` s; answer: it."""

    timeout: float | None


@dataclass(slots=True)
class Exchange:
    """Send `data` on `conn` (None: nothing), answer with the reply to request `rid`."""

    conn: Any
    data: bytes | None
    rid: int
    timeout: float | None


@dataclass(slots=True)
class Send:
    """Send `data` on `conn`."""

    conn: Any
    data: bytes


@dataclass(slots=True)
class Adopt:
    """`conn` carries the session from now on."""

    conn: Any


@dataclass(slots=True)
class Discard:
    """Close `conn`, which failed before it carried the session."""

    conn: Any


@dataclass(slots=True)
class Sleep:
    """Wait `seconds` before the next attempt."""

    seconds: float


Effect = Connect | Exchange | Send | Adopt | Discard | Sleep
Procedure = Generator[Effect, Any, ServerFrame | None]


class Resumption:
    """One resume of one session: when to retry, when to give up.

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


class Settings(Protocol):
    """Where and how long a client resumes (its attributes of those names)."""

    url: str
    open_timeout: float | None
    resume_timeout: float


def resume(
    core: ClientCore,
    settings: Settings,
    cause: SessionClosed,
    request: bytes | None,
    rid: int | None,
    timeout: float | None,
) -> Procedure:
    """Take the session back after `cause`, re-send `request` (the one in flight, if
    any) and, when `rid` is given, answer with its reply (within `timeout` s).

    Raises, as the call that was interrupted would: the session's
    ``closed_error`` if the server ended it, `cause` if it cannot be resumed
    (``resume_timeout`` 0, no resume token, a final close code), a
    :class:`SessionClosed` saying why when every attempt failed.
    """
    url, open_timeout, resume_timeout = (
        settings.url,
        settings.open_timeout,
        settings.resume_timeout,
    )
    if core.closed_error is not None:
        raise core.closed_error from None
    if not (resume_timeout > 0 and can_resume(core, cause)):
        raise cause
    logger.info("connection to %s dropped (%s); resuming the session", url, cause.reason)
    attempt = Resumption(core, url, cause, resume_timeout)
    while True:
        try:
            conn = yield Connect(attempt.connect_timeout(open_timeout))
            try:
                frame = core.open_frame(resume=True)
                wait = attempt.connect_timeout(open_timeout)
                core.resumed((yield Exchange(conn, encode(frame), frame.id, wait)))
                attempt.resumed = True
                if request is not None:
                    yield Send(conn, request)
            except BaseException:
                yield Discard(conn)
                raise
            yield Adopt(conn)
            if rid is None:
                return None
            reply: ServerFrame = yield Exchange(conn, None, rid, timeout)
            return reply
        except OpenEnvError as exc:
            yield Sleep(attempt.retry_after(exc))


class _Driver:
    """Feeds a procedure the outcome of each effect; :attr:`result` once it is done."""

    __slots__ = ("answer", "error", "procedure", "result")

    def __init__(self, procedure: Procedure) -> None:
        self.procedure = procedure
        self.answer: Any = None
        self.error: BaseException | None = None
        self.result: ServerFrame | None = None

    def next(self) -> Effect | None:
        """The next effect (the last outcome handed in); None when the procedure is done."""
        procedure, error = self.procedure, self.error
        try:
            return procedure.send(self.answer) if error is None else procedure.throw(error)
        except StopIteration as done:
            self.result = done.value
            return None


def run(procedure: Procedure, perform: Callable[[Effect], Any]) -> ServerFrame | None:
    """Drive `procedure` with blocking I/O: `perform` does each effect."""
    driver = _Driver(procedure)
    while (effect := driver.next()) is not None:
        try:
            driver.answer, driver.error = perform(effect), None
        except BaseException as exc:  # noqa: BLE001 - the procedure decides (it re-raises)
            driver.answer, driver.error = None, exc
    return driver.result


async def run_async(
    procedure: Procedure, perform: Callable[[Effect], Awaitable[Any]]
) -> ServerFrame | None:
    """Drive `procedure` with asyncio: `perform` does each effect."""
    driver = _Driver(procedure)
    while (effect := driver.next()) is not None:
        try:
            driver.answer, driver.error = await perform(effect), None
        except BaseException as exc:  # noqa: BLE001 - the procedure decides (it re-raises)
            driver.answer, driver.error = None, exc
    return driver.result
