"""One env of a vector client: its session, its connection and its request in flight.

An :class:`EnvSlot` sends its env's requests without waiting, reads the
replies its socket holds when the vector client's selector says so, and
resumes its session when the connection drops (the procedure of
:mod:`openenv_ws.client._resume`, its request in flight re-sent). What a
reply means for the batch (autoreset, same-step finals) is the vector
client's business.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import selectors
import ssl
from typing import Any

from ..errors import InvalidState, OpenEnvError, RemoteEnvError, SessionClosed
from ..protocol import Error, Result
from ._core import ClientCore
from ._idle import CallGuard, keep_alive, read_last_words
from ._resume import Adopt, Effect, resume, run
from ._ws import NOT_READY, BlockingWebSocket
from .sync import perform

__all__ = ["EnvSlot", "Pending"]

logger = logging.getLogger("openenv_ws.client")


class Pending(enum.Enum):
    """What an env's request in flight is, until its result is handed out."""

    IDLE = "idle"  # nothing in flight
    STEP = "step"  # a step with the user's action
    RESET = "reset"  # a reset the user asked for
    AUTORESET = "autoreset"  # next-step mode: the reset in place of the step after an end
    FINAL_RESET = "final_reset"  # same-step mode: the reset that completes an ending step


class EnvSlot:
    """Env `index` of a vector client: one session at `url` over one WebSocket.

    Args:
        index: the env id.
        url: the server's WebSocket URL.
        core: the session's protocol state.
        selector: the vector client's selector; the slot registers its socket
            there with itself as the key's data.
        guard: the call guard shared by the vector client's connections.
        open_timeout: seconds to connect (also for each resume attempt).
        resume_timeout: seconds to keep trying to resume (0: never).
        ssl_context: what a ``wss://`` connection verifies the server with.
    """

    __slots__ = (
        "awaiting",
        "core",
        "fd",
        "final",
        "guard",
        "index",
        "open_timeout",
        "pending",
        "request",
        "resume_timeout",
        "rid",
        "selector",
        "ssl_context",
        "url",
        "ws",
    )

    def __init__(
        self,
        index: int,
        url: str,
        core: ClientCore,
        selector: selectors.BaseSelector,
        guard: CallGuard,
        *,
        open_timeout: float | None,
        resume_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.index = index
        self.url = url
        self.core = core
        self.selector = selector
        self.guard = guard
        self.open_timeout = open_timeout
        self.resume_timeout = resume_timeout
        self.ssl_context = ssl_context
        self.ws: BlockingWebSocket | None = None
        self.fd = -1  # the descriptor registered with the selector (-1: none)
        self.request = b""  # the request in flight as sent, to re-send after a resume
        self.rid = 0
        self.pending = Pending.IDLE
        self.awaiting = False  # the reply to the request is still to come off the socket
        self.final: Result | None = None  # same-step mode: the ending step, until the reset

    @property
    def conn(self) -> BlockingWebSocket:
        ws = self.ws
        assert ws is not None, "the env's connection is not open yet"
        return ws

    def connect(self, timeout: float | None) -> BlockingWebSocket:
        """A new connection to the env's server (its shared region offered again)."""
        core = self.core
        ws = BlockingWebSocket(
            self.url,
            open_timeout=timeout,
            headers=core.headers(),
            max_size=core.max_frame_size,
            guard=self.guard,
            ssl_context=self.ssl_context,
        )
        try:
            # A resumed session's connection offers the same region again.
            core.handshake_answered(ws.response_headers, keep_descriptor=self.resume_timeout > 0)
        except BaseException:
            ws.close(timeout=0.1)
            raise
        return ws

    def register(self, ws: BlockingWebSocket) -> None:
        self.ws = ws
        fd = ws.fileno()
        self.selector.register(fd, selectors.EVENT_READ, self)
        self.fd = fd

    def unregister(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)

    # ------------------------------------------------------------------ requests

    def transmit(self, rid: int, data: bytes, kind: Pending) -> None:
        """Send the env its next request, resuming its session if the connection dropped.

        Raises:
            SessionClosed: the connection dropped and the session could not be resumed.
        """
        self.request = data
        self.rid = rid
        self.pending = kind
        self.awaiting = True
        try:
            self.conn.send(data)
        except SessionClosed as exc:
            error = self.resume(exc)  # re-sends the request
            if error is not None:
                self.pending = Pending.IDLE
                self.awaiting = False
                raise self.named(error) from None

    def next_reply(self) -> Result | BaseException | None:
        """The next reply the socket holds to the request in flight: its result, or the
        error it came to (the request is then over); None when no whole reply is here,
        or when the connection failed (the slot is then out of the selector)."""
        core = self.core
        while self.fd >= 0:
            try:
                frame = self.conn.recv_nowait(core.decode)
            except SessionClosed as exc:
                error = self.resume(exc)
                return None if error is None else self.fail(error)
            except Exception as exc:  # noqa: BLE001 - reported by the next recv()/step()
                return self.fail(exc)
            if frame is NOT_READY:
                return None
            if not self.awaiting or not core.is_reply(self.rid, frame):
                continue  # a late reply to a request that timed out
            self.awaiting = False
            if type(frame) is Result:
                return frame
            self.pending = Pending.IDLE
            if isinstance(frame, Error):
                try:
                    core.check(frame)
                except RemoteEnvError as exc:
                    return RemoteEnvError(
                        exc.code, f"env {self.index}: {exc.message}", fatal=exc.fatal
                    )
            return InvalidState(f"env {self.index}: expected a 'result' reply, got '{frame.OP}'")
        return None

    def fail(self, exc: BaseException) -> BaseException:
        """End the request in flight with `exc` (returned)."""
        self.pending = Pending.IDLE
        self.awaiting = False
        if self.ws is None or self.ws.closed:
            self.unregister()
        return exc

    def named(self, exc: BaseException) -> BaseException:
        """`exc`, a ``SessionClosed`` with this env named in its reason."""
        i = self.index
        if isinstance(exc, SessionClosed) and not exc.reason.startswith(f"env {i}"):
            return SessionClosed(exc.close_code, f"env {i}: {exc.reason}")
        return exc

    # ------------------------------------------------------------------ resuming

    def resume(self, cause: SessionClosed) -> OpenEnvError | None:
        """Take the session back on a new connection; None, or the error to report.

        The request in flight, if any, is re-sent byte for byte: the server
        answers it from its reply cache if it had served it already.
        """
        core = self.core
        self.unregister()
        if self.ws is not None:
            read_last_words(self.ws, core)  # closed between calls: what the server said
        request = self.request if self.awaiting else None
        try:
            run(resume(core, self, cause, request, None, None), self._perform)
        except OpenEnvError as final:
            return final
        return None

    def _perform(self, effect: Effect) -> Any:
        if isinstance(effect, Adopt):
            self.register(effect.conn)
            keep_alive(effect.conn)
            return None
        return perform(effect, self.core, self.connect)

    def close(self, timeout: float) -> None:
        if self.ws is not None:
            self.ws.close(timeout=timeout)
