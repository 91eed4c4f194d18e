"""Supervision of a server process's WebSocket sessions: idle timeout, resume, drain, metrics.

Every WebSocket connection gets a :class:`Link` and is served by the message
loop of :mod:`openenv_ws.server.session.connection`. The :class:`Supervisor` of a
server process knows every link and every resumable session, so it can

- close connections on which no request arrived within the idle timeout
  (``idle_timeout``, close 1001), or that opened no session within the
  open timeout;
- *park* a session whose connection dropped (no ``close``, no fatal error)
  for the grace period, and hand it to a new connection whose ``open``
  carries the session's ``resume_token``; if the old connection still looks
  alive (a half-open socket), the new one takes the session over;
- drain on shutdown: finish the requests that already arrived, then send
  ``shutting_down`` and close every connection with 1001.

Requests are served inline on the event loop (one request at a time per
process), so the supervisor only ever acts on a link while that link waits
for its next message or for a reply to be written: a request is never cut in
half. To wake a waiting link, the supervisor cancels its task; the link then
takes the messages that had already arrived before acting.

**Replies are replayed, never recomputed.** Each resumable session keeps its
last request and reply (:class:`~openenv_ws.server.session.replay.ReplayCache`). The
first request on a resumed connection that is byte-identical to that last
request (the client re-sent a request whose reply it never saw) is answered
with the stored reply, so a step is applied at most once whatever the moment
of the drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from time import perf_counter
from typing import Any

from ..._logsafe import redact_credentials
from ...environment import EnvFactory
from ...protocol import ClientFrame, Error, Open, SessionState
from ..runtime.metrics import ServerMetrics
from ..transport.asgi import Scope
from ..transport.auth import AUTHENTICATED, token_matches
from .admission import SessionRegistry
from .expiry import Expiry
from .pacing import ColdOpens
from .replay import ReplayCache
from .replies import CloseRequest, FrameReply, Reply
from .resume import ResumeStore
from .server_session import ServerSession

__all__ = [
    "DRAIN",
    "DRAIN_WINDOW",
    "IDLE",
    "TAKEOVER",
    "UNOPENED",
    "Link",
    "SupervisedSession",
    "Supervisor",
]

logger = logging.getLogger("openenv_ws.server")

# Why the supervisor ends a link.
DRAIN, IDLE, TAKEOVER = "drain", "idle", "takeover"
#: Ends a link that opened no session within the limits' ``open_timeout``.
UNOPENED = "unopened"
#: Seconds a draining link keeps taking requests that were already on their way
#: (sent before the drain began); later ones cross its close frame.
DRAIN_WINDOW = 0.02
# The key of the connections' check in the idle expiry.
_LINKS = "links"


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
        self.count = 0  # messages received (the idle check compares snapshots)
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
    """A :class:`ServerSession` with step timing, error counts, auth on ``open`` and resume."""

    __slots__ = ("_hist", "_sup", "link")

    def __init__(self, supervisor: Supervisor, link: Link) -> None:
        registry = supervisor.registry
        super().__init__(
            supervisor.factory,
            max_frame_size=registry.limits.max_frame_size,
            admit=registry.admit,
            release=registry.release,
            abandoned=registry.abandoned,
            compression=registry.limits.compression,
            byte_counts=registry.observation_bytes,
            max_envs=registry.limits.max_envs,
        )
        self._sup = supervisor
        self._hist = supervisor.metrics.step_seconds
        if supervisor.store.grace > 0:
            self.replay = ReplayCache(on_hit=supervisor.replayed)
        self.link: Link | None = link

    def handle(self, data: bytes) -> Reply:
        steps, start = self.steps, perf_counter()
        out = ServerSession.handle(self, data)
        if self.steps != steps:  # self._stepped(start), without the call: the step loop
            self._hist.observe(perf_counter() - start)
            self._sup.last_step = start
        return out

    def serve(self, frame: ClientFrame) -> FrameReply:
        steps, start = self.steps, perf_counter()
        out = ServerSession.serve(self, frame)
        if self.steps != steps:
            self._stepped(start)
        return out

    def _stepped(self, start: float) -> None:
        """A step was served from `start` (perf_counter) until now."""
        self._hist.observe(perf_counter() - start)
        self._sup.last_step = start

    def _gate(self, frame: Open) -> tuple[str, str] | None:
        """Why the server refuses `frame` before anything else (credentials, draining)."""
        sup = self._sup
        link = self.link
        if (
            sup.token is not None
            and not (link is not None and link.authenticated)
            and not token_matches(sup.token, frame.token)
        ):
            return (
                "auth",
                "this server requires a bearer token: send it in the 'Authorization: Bearer' "
                "handshake header or in open.token (clients: token=... or OPENENV_WS_TOKEN)",
            )
        if sup.draining:
            return ("shutting_down", "the server is shutting down; open the session elsewhere")
        return None

    def open_refusal(self, frame: Open) -> tuple[str, str] | None:
        return self._gate(frame) or super().open_refusal(frame) or self._sup.registry.refusal(self)

    def serve_open(self, frame: Open) -> FrameReply:
        sup = self._sup
        refused = self._gate(frame)
        if refused is not None:
            return self.error(frame.id, *refused)
        if frame.resume is not None:
            return sup.resume(self, frame)
        remember = self.replay is not None
        if remember:
            self.resume_token = sup.store.mint(self)
        try:
            return super().serve_open(frame)
        finally:
            if self.env is None and remember:
                sup.store.forget(self)  # refused (bad config, capacity): nothing to resume
                self.resume_token = None

    def error(self, rid: int | None, code: str, message: str) -> tuple[Error, CloseRequest | None]:
        self._sup.metrics.error(code)
        return super().error(rid, code, message)


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
        #: The process's one idle expiry (connections, parked sessions, HTTP sessions).
        self.expiry = Expiry()
        self.store: ResumeStore[SupervisedSession] = ResumeStore(
            self.limits.resume_grace or 0.0, self._expire, self.expiry
        )
        self.draining = False
        idle_timeout = self.limits.idle_timeout or float("inf")
        open_timeout = self.limits.open_timeout or float("inf")
        # How often the connections are looked at: a quarter of the shorter timeout.
        self._sweep_period = min(max(min(idle_timeout, open_timeout) / 4, 0.05), 5.0)
        #: When a session of this process last stepped (perf_counter); paces cold opens.
        self.last_step = 0.0
        self.cold_opens = ColdOpens(
            self.limits.cold_open_share,
            self.limits.cold_open_queue,
            env_factory,
            last_step=lambda: self.last_step,
            deadline=self.limits.step_timeout,
        )

    # ------------------------------------------------------------------ connections

    def connect(self, scope: Scope) -> Link:
        loop = asyncio.get_running_loop()
        link = Link(
            asyncio.current_task(),
            authenticated=self.token is None or bool(scope.get(AUTHENTICATED)),
            now=loop.time(),
            peer=_peer(scope),
        )
        link.session = SupervisedSession(self, link)
        link.session.peer = link.peer  # per-peer quotas (the registry's)
        self.links.add(link)
        if self.draining:
            link.end(DRAIN)
        elif (self.limits.idle_timeout or self.limits.open_timeout) and _LINKS not in self.expiry:
            self.expiry.after(_LINKS, self._sweep_period, self._sweep_links)
        return link

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

    def resume(self, fresh: SupervisedSession, frame: Open) -> FrameReply:
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
            return fresh.error(frame.id, "resume_failed", why)
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
        if session.packer is not None:
            session.packer.key()  # the client may have missed frames: no delta against them
        if session.replay is not None:
            session.replay.arm()  # the client may send its last request again
        self.metrics.count("sessions_resumed")
        logger.info("session %s resumed on a new connection", session.session_id)
        return session.opened_reply(frame.id), None

    def replayed(self) -> None:
        """A reply was sent again from a session's replay cache."""
        self.metrics.count("replayed")

    def _expire(self, session: SupervisedSession) -> None:
        if session.link is None:
            self.metrics.count("sessions_expired")
            self._end(session)

    def _end(self, session: SupervisedSession) -> None:
        self.store.forget(session)
        session.close()

    # ------------------------------------------------------------------ idle, drain, shutdown

    def _sweep_links(self, now: float) -> float | None:
        """End the links idle (or unopened) for too long; when to look again."""
        idle_timeout = self.limits.idle_timeout or float("inf")
        open_timeout = self.limits.open_timeout or float("inf")
        for link in list(self.links):
            if link.count != link.mark:
                link.mark, link.mark_time = link.count, now
            elif link.waiting and now - link.mark_time >= idle_timeout:
                link.end(IDLE)
            if link.waiting and now - link.since >= open_timeout and not _opened(link):
                link.end(UNOPENED)
        return now + self._sweep_period if self.links and not self.draining else None

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
        self.expiry.cancel(_LINKS)
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
        """Free everything still held (parked sessions, expiry checks); the app is stopping."""
        self.draining = True
        self.expiry.cancel(_LINKS)
        for session in self.store.parked_sessions():
            self._end(session)
        self.expiry.close()

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


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None
