"""Connection supervision: idle timeout, resume, drain, metrics and auth on ``open``.

Every WebSocket connection gets a :class:`Link` and is served by
:meth:`Supervisor.serve`. The :class:`Supervisor` of a server process knows
every link and every resumable session, so it can

- close connections on which no request arrived within the idle timeout
  (``idle_timeout``, close 1001);
- *park* a session whose connection dropped (no ``close``, no fatal error)
  for the grace period, and hand it to a new connection whose ``open``
  carries the session's ``resume_token``; if the old connection still looks
  alive (a half-open socket), the new one takes the session over;
- drain on shutdown: finish the requests that already arrived, then send
  ``shutting_down`` and close every connection with 1001.

Requests are served inline on the event loop (one request at a time per
process), so the supervisor only ever acts on a link while that link waits
for its next message or for a reply to be written: a request is never cut
in half. Sessions whose environment is not inline (its calls are not
bounded) are served on a worker thread of their own under the per-call
deadline ``step_timeout`` (see :mod:`openenv_ws.server._offload`); their
link waits for the reply as it would for a reply to be written. To wake a waiting link, the supervisor cancels its task; the link
then takes the messages that had already arrived before acting.

**Replies are replayed, never recomputed.** Each session keeps its last
request and reply. The first request on a resumed connection that is
byte-identical to that last request (same op, id and fields: the client
re-sent a request whose reply it never saw) is answered with the stored
reply, so a step is applied at most once whatever the moment of the drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .._logsafe import redact_credentials
from .._shm import ServerRegion
from ..environment import EnvFactory
from ..protocol import Open, SessionState
from ._fastws import DIRECT
from ._offload import call
from ._pacing import ColdOpens
from ._session import CloseRequest, ServerSession
from .auth import AUTHENTICATED, token_matches
from .metrics import ServerMetrics
from .resume import ResumeStore

if TYPE_CHECKING:
    from .app import SessionRegistry

__all__ = ["Link", "SupervisedSession", "Supervisor"]

logger = logging.getLogger("openenv_ws.server")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Reply = tuple[bytes, CloseRequest | None]

# Why the supervisor ends a link.
DRAIN, IDLE, TAKEOVER = "drain", "idle", "takeover"
#: Ends a link that opened no session within the limits' ``open_timeout``.
UNOPENED = "unopened"
#: Seconds a draining link keeps taking requests that were already on their way
#: (sent before the drain began); later ones cross its close frame.
DRAIN_WINDOW = 0.02
_TAKEN_OVER = "the session was resumed on another connection"
# Disconnect codes of a connection lost without either side choosing to close:
# none received (1005: uvicorn's code for a lost connection, 1006), heartbeat
# timeout (1011), server restart (1012), a gateway's failures (1014).
_DROPS = frozenset({None, 1005, 1006, 1011, 1012, 1014})
_TEXT = "text messages are not protocol v1 frames; send binary MessagePack frames"


class Link:
    """One WebSocket connection as the supervisor sees it."""

    __slots__ = (
        "authenticated",
        "count",
        "drain_until",
        "ending",
        "inline_close",
        "mark",
        "mark_time",
        "peer",
        "poked",
        "session",
        "since",
        "task",
        "waiting",
    )

    def __init__(
        self,
        task: asyncio.Task[Any] | None,
        *,
        authenticated: bool,
        now: float,
        peer: str | None = None,
    ) -> None:
        self.task = task
        self.peer = peer  # the client's address, if known
        self.authenticated = authenticated
        self.session: SupervisedSession | None = None
        self.waiting = False  # awaiting its next message: safe to wake
        self.ending: str | None = None  # DRAIN, IDLE or TAKEOVER once the supervisor ends it
        self.poked = False  # its task was cancelled to wake it
        self.count = 0  # messages received (the idle sweeper compares snapshots)
        self.mark = 0
        self.mark_time = now
        self.since = now  # connected at
        self.drain_until: float | None = None
        self.inline_close = False  # a request served inline ended the session with a close

    def end(self, reason: str) -> None:
        """Ask the link to finish: at once if it waits for a message, else after its reply."""
        if self.ending is None or reason == TAKEOVER:
            self.ending = reason
        if self.waiting and not self.poked and self.task is not None:
            self.poked = True
            self.task.cancel()


class SupervisedSession(ServerSession):
    """A :class:`ServerSession` with a reply cache, step timing, error counts and resume."""

    __slots__ = ("_armed", "_hist", "_last", "_remember", "_sup", "link")

    def __init__(self, supervisor: Supervisor, link: Link) -> None:
        registry = supervisor.registry
        super().__init__(
            supervisor.factory,
            max_frame_size=registry.limits.max_frame_size,
            admit=registry.admit,
            release=registry.release,
        )
        self._sup = supervisor
        self._hist = supervisor.metrics.step_seconds
        self._remember = supervisor.store.grace > 0
        self._last: tuple[bytes, Reply] | None = None
        self._armed = False  # the next request may be a re-send of the last one
        self.link: Link | None = link

    def handle(self, data: bytes) -> Reply:
        if self._armed:
            self._armed = False
            replay = self._last
            if replay is not None and replay[0] == data:
                self._sup.metrics.count("replayed")
                return replay[1]
        steps = self.steps
        start = perf_counter()
        out = ServerSession.handle(self, data)
        if self.steps != steps:
            self._hist.observe(perf_counter() - start)
            self._sup.last_step = start
        if self._remember:
            self._last = (data, out)
        return out

    def _open(self, frame: Open) -> Reply:
        sup = self._sup
        link = self.link
        if (
            sup.token is not None
            and not (link is not None and link.authenticated)
            and not token_matches(sup.token, frame.token)
        ):
            return self._error(
                frame.id,
                "auth",
                "this server requires a bearer token: send it in the 'Authorization: Bearer' "
                "handshake header or in open.token (clients: token=... or OPENENV_WS_TOKEN)",
            )
        if sup.draining:
            return self._error(
                frame.id, "shutting_down", "the server is shutting down; open the session elsewhere"
            )
        if frame.resume is not None:
            return sup.resume(self, frame)
        if self._remember:
            self.resume_token = sup.store.mint(self)
        try:
            return super()._open(frame)
        finally:
            if self.env is None and self._remember:
                sup.store.forget(self)  # refused (bad config, capacity): nothing to resume
                self.resume_token = None

    def _error(self, rid: int | None, code: str, message: str) -> Reply:
        self._sup.metrics.error(code)
        return super()._error(rid, code, message)

    def prepare_replay(self) -> None:
        """The next request may be a re-send of the last one: answer it from the cache.

        The last one is taken when the next request is served: a call still
        running on the worker thread (a session that is not inline) counts.
        """
        self._armed = True


class Supervisor:
    """Links, resumable sessions, idle sweeping and draining of one server process.

    Args:
        env_factory: makes one environment per session.
        registry: the process's session registry (capacity, counters).
        token: the bearer token sessions need, or None.
    """

    def __init__(
        self, env_factory: EnvFactory, registry: SessionRegistry, *, token: str | None = None
    ) -> None:
        redact_credentials()  # websockets logs handshake headers at debug level
        self.factory = env_factory
        self.registry = registry
        self.limits = registry.limits
        self.token = token
        self.metrics = ServerMetrics(self.gauges)
        self.links: set[Link] = set()
        self.store: ResumeStore[SupervisedSession] = ResumeStore(
            self.limits.resume_grace or 0.0, self._expire
        )
        self.draining = False
        self._sweeper: asyncio.Task[None] | None = None
        #: When a session of this process last stepped (perf_counter); paces cold opens.
        self.last_step = 0.0
        self.cold_opens = ColdOpens(
            self.limits.cold_open_share,
            self.limits.cold_open_queue,
            env_factory,
            last_step=lambda: self.last_step,
        )

    # ------------------------------------------------------------------ one connection

    async def run(
        self,
        scope: MutableMapping[str, Any],
        receive: Receive,
        send: Send,
        *,
        native: Callable[[], bool] | None = None,
        shared: ServerRegion | None = None,
    ) -> None:
        """Serve an accepted WebSocket connection until it ends.

        Args:
            native: says whether the connection speaks protocol v1 as it is
                (not a dialect translated by `receive`/`send`); only then may
                its requests be served inline by the WebSocket protocol (see
                :mod:`openenv_ws.server._fastws`). None: always.
            shared: the client's shared region for observations (mapped from
                the handshake offer); the session uses it once the connection
                is known to speak protocol v1.
        """
        link = self.connect(scope)
        inline = scope.get("extensions", {}).get(DIRECT)
        dropped = False
        try:
            dropped = await self.serve(
                link, receive, send, inline=inline, native=native, shared=shared
            )
        finally:
            if inline is not None:
                inline.attach(None)
            self.disconnect(link, dropped=dropped)

    def connect(self, scope: MutableMapping[str, Any]) -> Link:
        loop = asyncio.get_running_loop()
        link = Link(
            asyncio.current_task(),
            authenticated=self.token is None or bool(scope.get(AUTHENTICATED)),
            now=loop.time(),
            peer=_peer(scope),
        )
        link.session = SupervisedSession(self, link)
        self.links.add(link)
        if self.draining:
            link.end(DRAIN)
        elif (self.limits.idle_timeout or self.limits.open_timeout) and self._sweeper is None:
            self._sweeper = loop.create_task(self._sweep_forever())
        return link

    async def serve(
        self,
        link: Link,
        receive: Receive,
        send: Send,
        *,
        inline: Any = None,
        native: Callable[[], bool] | None = None,
        shared: ServerRegion | None = None,
    ) -> bool:
        """The message loop; True when the connection dropped, False when it was closed.

        With `inline` (the WebSocket protocol's direct-handling hook), requests
        that arrive while this loop waits are served by :meth:`_inline_handler`
        inside the protocol's ``data_received``, with the same session call;
        this loop then only sees what needs waiting (the first request,
        requests arriving while a reply is blocked, control flow).

        *Dropped* is a loss the peer did not choose: no close frame (reset,
        EOF), a heartbeat timeout, a server restart. A close frame from the
        peer, a protocol violation the WebSocket layer refused (1002, 1007,
        1009, ...) and every close the server decided are *closed*.
        """
        undecided = True
        while True:
            if undecided and (native is None or native()):
                undecided = False
                if inline is not None:
                    inline.attach(self._inline_handler(link))
                if shared is not None and link.session is not None:
                    link.session.use_shared(shared)
            if link.ending is None:
                link.waiting = True
                try:
                    message: Message | None = await receive()
                    link.waiting = False
                except asyncio.CancelledError:
                    link.waiting = False
                    if not link.poked:
                        raise  # not a wake-up of ours
                    link.poked = False
                    task = asyncio.current_task()
                    assert task is not None
                    task.uncancel()
                    message = await _pending(link, receive)
            else:
                message = await _pending(link, receive)
            session = link.session
            if message is None or session is None:  # ended, or taken over meanwhile
                await self._farewell(link, send)
                return False
            if message["type"] != "websocket.receive":  # websocket.disconnect
                return not link.inline_close and message.get("code") in _DROPS
            link.count += 1
            data = message.get("bytes")
            close: CloseRequest | None
            if data is None:
                reply, close = session.refuse("text_frame", _TEXT)
            elif session.inline:
                reply, close = session.handle(data)
            elif session.env is None:  # not open yet: an open may have to wait its turn
                reply, close = await self.cold_opens.serve(session, data, link.peer)
            else:
                reply, close = await call(session, data, self.limits.step_timeout)
            try:
                await send({"type": "websocket.send", "bytes": reply})
                if close is not None:
                    await send(
                        {"type": "websocket.close", "code": close.code, "reason": close.reason}
                    )
            except (OSError, RuntimeError):  # the transport is gone (uvicorn's ClientDisconnected)
                return close is None
            if close is not None:
                return False

    @staticmethod
    def _inline_handler(link: Link) -> Callable[[bytes], Any]:
        """Serve a request inline, as :meth:`serve` would, while `link` waits for one."""

        def handle(data: bytes) -> tuple[bytes, tuple[int, str] | None] | None:
            session = link.session
            if (
                session is None
                or not link.waiting
                or link.ending is not None
                or link.poked
                or not session.inline
            ):
                # The loop has something to do first, or the request goes to the
                # session's worker thread: queue it for the loop.
                return None
            link.count += 1
            reply, close = session.handle(data)
            if close is None:
                return reply, None
            link.inline_close = True
            return reply, (close.code, close.reason)

        return handle

    async def _farewell(self, link: Link, send: Send) -> None:
        session = link.session
        messages: list[Message] = []
        if link.ending == TAKEOVER or session is None:
            messages.append({"type": "websocket.close", "code": 1001, "reason": _TAKEN_OVER})
        else:
            if link.ending == UNOPENED:
                self.metrics.count("idle_closed")
                reply, close = session.refuse(
                    "idle_timeout",
                    f"no session was opened within the server's open timeout "
                    f"({self.limits.open_timeout:g} s); send open right after connecting",
                )
            elif link.ending == IDLE:
                self.metrics.count("idle_closed")
                reply, close = session.refuse(
                    "idle_timeout",
                    f"no request arrived within the server's idle timeout "
                    f"({self.limits.idle_timeout:g} s); open a new session, or start the server "
                    "with a larger --idle-timeout (0: never)",
                )
            else:
                reply, close = session.refuse(
                    "shutting_down",
                    "the server is shutting down; open a new session (on another server)",
                )
            messages.append({"type": "websocket.send", "bytes": reply})
            messages.append({"type": "websocket.close", "code": close.code, "reason": close.reason})
        with contextlib.suppress(OSError, RuntimeError):
            for message in messages:
                await send(message)

    def disconnect(self, link: Link, *, dropped: bool) -> None:
        """The link ended: park its session if the connection dropped mid-session, else close it."""
        self.links.discard(link)
        session, link.session = link.session, None
        if session is None or session.link is not link:
            return  # taken over by another connection
        session.link = None
        if (
            dropped
            and not self.draining
            and session.env is not None
            and session.state is not SessionState.CLOSED
            and self.store.grace > 0
        ):
            self.store.park(session)
            return
        self._end(session)

    # ------------------------------------------------------------------ resume

    def resume(self, fresh: SupervisedSession, frame: Open) -> Reply:
        """Serve ``open`` with ``resume``: move the parked (or stale) session to `fresh`'s link."""
        assert frame.resume is not None
        session = self.store.claim(frame.resume) if self.store.grace > 0 else None
        link = fresh.link
        if session is None or session.env is None or link is None:
            self.metrics.count("resume_failures")
            why = (
                "the resume token is unknown or its session expired "
                f"(sessions wait {self.store.grace:g} s for their client); open a new session"
                if self.store.grace > 0
                else "this server does not keep sessions for resumption (grace period 0)"
            )
            return fresh._error(frame.id, "resume_failed", why)
        old = session.link
        if old is not None and old is not link:
            # The old connection has not noticed its peer is gone (half-open): take over.
            old.session = None
            old.end(TAKEOVER)
        session.link = link
        link.session = session
        # The new connection's region (or none: inline) replaces the old connection's.
        session.use_shared(fresh.shared)
        fresh.shared = None
        session.prepare_replay()
        self.metrics.count("sessions_resumed")
        logger.info("session %s resumed on a new connection", session.session_id)
        return session.opened_reply(frame.id), None

    def _expire(self, session: SupervisedSession) -> None:
        if session.link is None:
            self.metrics.count("sessions_expired")
            self._end(session)

    def _end(self, session: SupervisedSession) -> None:
        self.store.forget(session)
        session.close()

    # ------------------------------------------------------------------ idle, drain, shutdown

    async def _sweep_forever(self) -> None:
        idle_timeout = self.limits.idle_timeout or float("inf")
        open_timeout = self.limits.open_timeout or float("inf")
        period = min(max(min(idle_timeout, open_timeout) / 4, 0.05), 5.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for link in list(self.links):
                if link.count != link.mark:
                    link.mark, link.mark_time = link.count, now
                elif link.waiting and now - link.mark_time >= idle_timeout:
                    link.end(IDLE)
                if link.waiting and now - link.since >= open_timeout and not _opened(link):
                    link.end(UNOPENED)

    def _stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def drain(self, timeout: float | None = None) -> None:
        """Finish what already arrived, then close every connection with 1001.

        Args:
            timeout: seconds to wait for links that are still writing a reply
                (default: the limits' ``drain_timeout``); after it the server's
                own shutdown closes what is left.
        """
        if timeout is None:
            timeout = self.limits.drain_timeout
        self.draining = True
        self._stop_sweeper()
        for session in self.store.parked_sessions():
            self._end(session)
        links = list(self.links)
        logger.info("draining %d connection(s)", len(links))
        for link in links:
            link.end(DRAIN)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.links and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if self.links:
            logger.warning("%d connection(s) still busy after the drain timeout", len(self.links))

    async def close(self) -> None:
        """Free everything still held (parked sessions, the sweeper); the app is stopping."""
        self.draining = True
        self._stop_sweeper()
        for session in self.store.parked_sessions():
            self._end(session)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """A Starlette lifespan that frees the parked sessions when the app stops."""
        yield
        await self.close()

    # ------------------------------------------------------------------ observability

    def gauges(self) -> dict[str, float]:
        return {
            "sessions": len(self.registry.active),
            "sessions_parked": self.store.parked,
            "connections": len(self.links),
            "max_sessions": self.limits.max_sessions,
            "draining": int(self.draining),
            "sessions_opened_total": self.registry.opened_total,
        }

    def health(self) -> dict[str, Any]:
        """Extra ``/health`` fields: parked sessions, connections, draining."""
        return {
            "parked": self.store.parked,
            "connections": len(self.links),
            "draining": self.draining,
            "cold_opens": self.cold_opens.stats(),
        }


def _opened(link: Link) -> bool:
    """Whether a session was opened (or resumed) on `link`."""
    session = link.session
    return session is None or session.state is not SessionState.CONNECTED


def _peer(scope: MutableMapping[str, Any]) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


async def _pending(link: Link, receive: Receive) -> Message | None:
    """A message that had already arrived when the link was woken, or None.

    ``receive`` returns without suspending when a message is queued, so a
    zero timeout takes exactly the messages the server has read. A draining
    link also waits :data:`DRAIN_WINDOW` for bytes already in the socket's
    buffer, which the server reads only between two messages.
    """
    if link.ending == TAKEOVER:
        return None
    loop = asyncio.get_running_loop()
    if link.ending == DRAIN:
        if link.drain_until is None:
            link.drain_until = loop.time() + DRAIN_WINDOW
        until = link.drain_until
    else:
        until = loop.time()
    try:
        async with asyncio.timeout_at(until):
            message = await receive()
    except TimeoutError:
        return None
    if link.ending in (IDLE, UNOPENED):
        link.ending = None  # a request had arrived: the link was not idle after all
    return message
