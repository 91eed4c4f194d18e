"""Connection limits and the handshake deadline, below the HTTP parser.

A client that opens connections and sends its request a byte at a time
(*slowloris*) costs the server one descriptor each and nothing else; without
limits a few thousand such connections take every descriptor the process has,
and new clients (``/health`` included) get connection resets. The
:class:`ConnectionGuard` of a server process, enforced by the HTTP protocol
class :func:`guarded` makes, bounds that:

- **Handshake deadline.** A connection must complete its request (the head,
  and the body of a plain HTTP request) within ``handshake_timeout`` seconds
  of connecting, or of starting its next request on a kept-alive connection;
  a WebSocket upgrade must also have been accepted by then. Otherwise the
  connection is aborted.
- **Caps.** At most ``max_connections`` connections per process and
  ``max_per_peer`` per client address. A connection over a cap first takes
  the place of the oldest connection under that cap still sending its
  request head (which is aborted): trickling requests cannot lock anyone
  out, they only push each other out. Only when the cap is full of
  connections that completed their request is the new one answered
  **HTTP 503** with a body naming the limit (never a reset).
- **Head cap.** A request head (request line and headers) larger than
  ``max_head_size`` bytes is answered **HTTP 431** and the connection
  closed; the parser never holds more than that plus one read.
- **TLS from accept.** With TLS, the loop of :mod:`.tlsaccept` shows each
  connection to its protocol at accept (``raw_made``), before its TLS
  handshake: it is counted, may be shed, and has the handshake deadline
  from then on, like a plain one (the deadline covers the TLS handshake).
- **A reserve for plain HTTP.** WebSocket connections may take up to
  :func:`websocket_share` of each cap; the rest is kept for plain requests,
  so ``/health`` and ``/metrics`` answer even when every WebSocket slot is
  taken. A WebSocket handshake beyond its share gets 503.

Counts are released when the connection ends, an upgraded one included (its
WebSocket protocol class is a subclass that reports its end). Nothing here
runs per WebSocket message.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import resource
import time
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..limits import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_PEER,
    DEFAULT_MAX_HEAD_SIZE,
)

__all__ = [
    "ConnectionGuard",
    "connection_cap",
    "fit_to_fd_limit",
    "guarded",
    "raise_fd_limit",
    "websocket_share",
]

#: Descriptors kept out of the connection cap (listening socket, logs, files, pipes).
FD_HEADROOM = 64
#: Refused connections that may linger at once, reading what the client still sends
#: so closing does not reset the connection before the 503 is read.
MAX_LINGERING = 256
#: Seconds a refused connection lingers at most, and bytes it reads at most.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 16
#: Seconds between two warnings about refused and aborted connections.
WARN_EVERY = 10.0

logger = logging.getLogger("openenv_ws.server")


def websocket_share(cap: int) -> int:
    """How many of `cap` connections WebSockets may take: all but a 32nd (at least one,
    unless `cap` is 1), kept for plain HTTP requests such as ``/health``."""
    return cap - min(cap - 1, max(1, cap // 32))


def raise_fd_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fit_to_fd_limit(max_connections: int, fd_limit: int) -> int:
    """`max_connections`, lowered if needed so the cap binds before the descriptor table."""
    if fd_limit == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, fd_limit - FD_HEADROOM))


def connection_cap(max_connections: int) -> tuple[int, str | None]:
    """Raise the descriptor limit (:func:`raise_fd_limit`) and fit `max_connections` under it.

    Returns:
        The cap to use, and a warning to log when it had to be lowered.
    """
    fd_limit = raise_fd_limit()
    cap = fit_to_fd_limit(max_connections, fd_limit)
    if cap == max_connections:
        return cap, None
    return cap, (
        f"--max-connections {max_connections} lowered to {cap}: this process may open only "
        f"{fd_limit} file descriptors (raise the hard limit, ulimit -Hn, to allow more)"
    )


class Phase(enum.Enum):
    """Where a guarded connection is in its current request."""

    HEAD = "head"  # sending its request head: may be shed, has a deadline
    BODY = "body"  # head read, body still coming: has a deadline
    IDLE = "idle"  # request complete (response under way, or kept alive)
    UPGRADED = "upgraded"  # handed to the WebSocket protocol
    REFUSED = "refused"  # answered 503, lingering


class _Peer:
    __slots__ = ("count", "pending", "websockets")

    def __init__(self) -> None:
        self.count = 0
        self.websockets = 0
        #: Connections of this peer sending a request head, oldest first.
        self.pending: dict[GuardedProtocol, None] = {}


class ConnectionGuard:
    """The connection counts and limits of one server process.

    Args:
        max_connections: connections held at once (None: no limit).
        max_per_peer: connections one client address holds at once (None: no limit).
        handshake_timeout: seconds to complete a request head (and body, or
            WebSocket upgrade; with TLS, the TLS handshake first); None: no deadline.
        max_head_size: bytes of one request head (request line and headers);
            a larger one is answered 431. None: no limit.
    """

    def __init__(
        self,
        *,
        max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
        max_per_peer: int | None = DEFAULT_MAX_CONNECTIONS_PER_PEER,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        max_head_size: int | None = DEFAULT_MAX_HEAD_SIZE,
    ) -> None:
        for name, value in (
            ("max_connections", max_connections),
            ("max_per_peer", max_per_peer),
            ("max_head_size", max_head_size),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None), got {value}")
        if handshake_timeout is not None and handshake_timeout <= 0:
            raise ValueError(
                f"handshake_timeout must be positive (or None), got {handshake_timeout}"
            )
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.handshake_timeout = handshake_timeout
        self.max_head_size = max_head_size
        self.connections = 0
        self.websockets = 0
        self.lingering = 0
        self.peers: dict[str, _Peer] = {}
        #: Connections sending a request head, oldest first.
        self.pending: dict[GuardedProtocol, None] = {}
        #: Totals since start: refused (503), shed (aborted for a newcomer), timed_out,
        #: too_large (431: a request head over ``max_head_size``).
        self.counts = {"refused": 0, "shed": 0, "timed_out": 0, "too_large": 0}
        self._unreported = dict.fromkeys(self.counts, 0)
        self._warned = 0.0
        self._ws_classes: dict[type[Any], type[Any]] = {}

    # ------------------------------------------------------------------ admission

    def admit(self, conn: GuardedProtocol, address: str) -> str | None:
        """Count `conn` in, making room by shedding if needed; or the reason to refuse it."""
        peer = self.peers.get(address)
        if peer is None:
            peer = self.peers[address] = _Peer()
        if not self._room(peer.count, self.max_per_peer, peer.pending):
            self._forget_if_unused(address, peer)
            return (
                f"this address holds the server's maximum of {self.max_per_peer} "
                "connections per client (--max-connections-per-peer); close some or retry later"
            )
        if not self._room(self.connections, self.max_connections, self.pending):
            self._forget_if_unused(address, peer)
            return (
                f"the server holds its maximum of {self.max_connections} connections "
                "(--max-connections); retry later or use another server"
            )
        peer.count += 1
        self.connections += 1
        self.peers[address] = peer  # again: shedding its last connection may have dropped it
        conn.peer = peer
        conn.address = address
        return None

    def upgrade_refusal(self, conn: GuardedProtocol) -> str | None:
        """Why `conn` may not become a WebSocket connection, or None (it is counted as one)."""
        peer = conn.peer
        assert peer is not None
        if self.max_per_peer is not None and peer.websockets >= websocket_share(self.max_per_peer):
            return (
                f"this address holds the server's maximum of {websocket_share(self.max_per_peer)} "
                "WebSocket connections per client (--max-connections-per-peer, less a reserve "
                "for plain HTTP requests); close some or retry later"
            )
        if self.max_connections is not None and self.websockets >= websocket_share(
            self.max_connections
        ):
            return (
                f"the server holds its maximum of {websocket_share(self.max_connections)} "
                "WebSocket connections (--max-connections, less a reserve for plain HTTP "
                "requests); retry later or use another server"
            )
        peer.websockets += 1
        self.websockets += 1
        return None

    def release(self, conn: GuardedProtocol) -> None:
        """`conn` ended (or was shed): uncount it. Idempotent."""
        peer = conn.peer
        if peer is None:
            return
        conn.peer = None
        self._unpend(conn, peer)
        peer.count -= 1
        self.connections -= 1
        if conn.phase is Phase.UPGRADED:
            peer.websockets -= 1
            self.websockets -= 1
        self._forget_if_unused(conn.address, peer)

    def pend(self, conn: GuardedProtocol) -> None:
        """`conn` starts sending a request head (it may be shed until it completes)."""
        if conn.peer is not None:
            self.pending[conn] = None
            conn.peer.pending[conn] = None

    def unpend(self, conn: GuardedProtocol) -> None:
        if conn.peer is not None:
            self._unpend(conn, conn.peer)

    def _unpend(self, conn: GuardedProtocol, peer: _Peer) -> None:
        self.pending.pop(conn, None)
        peer.pending.pop(conn, None)

    def _room(self, count: int, cap: int | None, pending: dict[GuardedProtocol, None]) -> bool:
        """Whether one more fits under `cap`, after shedding the oldest of `pending` if needed."""
        if cap is None or count < cap:
            return True
        victim = next(iter(pending), None)
        if victim is None:
            return False
        self.note("shed")
        self.release(victim)
        victim.abort()
        return True

    def _forget_if_unused(self, address: str, peer: _Peer) -> None:
        if peer.count == 0 and self.peers.get(address) is peer:
            del self.peers[address]

    # ------------------------------------------------------------------ reporting

    def note(self, what: str) -> None:
        """Count a refusal, shed, timeout or 431; warn about them at most every :data:`WARN_EVERY` s."""
        self.counts[what] += 1
        self._unreported[what] += 1
        now = time.monotonic()
        if now - self._warned < WARN_EVERY:
            return
        self._warned = now
        unreported = self._unreported
        self._unreported = dict.fromkeys(unreported, 0)
        logger.warning(
            "connection limits: %d connection(s) refused with 503, %d aborted to make room for "
            "new ones while still sending their request, %d aborted at the handshake deadline, "
            "%d answered 431 for a request head too large (%d open now; see --max-connections, "
            "--max-connections-per-peer, --handshake-timeout, --max-head-size)",
            unreported["refused"],
            unreported["shed"],
            unreported["timed_out"],
            unreported["too_large"],
            self.connections,
        )

    # ------------------------------------------------------------------ WebSocket side

    def websocket_class(self, base: type[Any]) -> type[Any]:
        """`base` (a uvicorn WebSocket protocol class) reporting its end to this guard."""
        cls = self._ws_classes.get(base)
        if cls is None:
            cls = self._ws_classes[base] = type(
                base.__name__,
                (base,),
                {"guard_owner": None, "connection_lost": _release_on_lost(base.connection_lost)},
            )
        return cls


def _release_on_lost(lost: Any) -> Any:
    def connection_lost(self: Any, exc: Exception | None) -> None:
        try:
            lost(self, exc)
        finally:
            owner = self.guard_owner
            if owner is not None:
                self.guard_owner = None
                owner.finish()

    return connection_lost


_REFUSED_HEAD = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: application/json\r\n"
    b"retry-after: 1\r\n"
    b"connection: close\r\n"
)


_TOO_LARGE_HEAD = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"connection: close\r\n"
)


def refusal_response(message: str) -> bytes:
    """The bytes of a 503 answer saying `message`."""
    body = json.dumps({"error": "connection_limit", "message": message}).encode()
    return b"%scontent-length: %d\r\n\r\n%s" % (_REFUSED_HEAD, len(body), body)


def head_too_large_response(limit: int) -> bytes:
    """The bytes of a 431 answer naming the head limit of `limit` bytes."""
    message = (
        f"the request head (request line and headers) is larger than the server's limit of "
        f"{limit} bytes (--max-head-size); send shorter headers"
    )
    body = json.dumps({"error": "head_too_large", "message": message}).encode()
    return b"%scontent-length: %d\r\n\r\n%s" % (_TOO_LARGE_HEAD, len(body), body)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a :class:`ConnectionGuard` (see :func:`guarded`)."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peer: _Peer | None = None
        self.address = ""
        self.phase = Phase.HEAD
        self._made = False  # uvicorn's connection_made ran
        #: The plain transport (with TLS, below the TLS layer; set at accept).
        self._raw: asyncio.Transport | None = None
        self._refusal: str | None = None  # TLS: refused at accept, answered after the handshake
        self._head_bytes = 0  # read since the current request head began
        self._deadline: asyncio.TimerHandle | None = None
        self._upgraded: Any = None
        self._lingered = 0  # bytes read and dropped after a refusal
        self._lingering = False
        if self.ws_protocol_class is not None:
            self.ws_protocol_class = self.guard.websocket_class(self.ws_protocol_class)
        self._tap = _UpgradeAwareParser(self.parser)
        self.parser = self._tap  # type: ignore[assignment]  # the same methods, delegated

    # ------------------------------------------------------------------ transport events

    def raw_made(self, transport: asyncio.Transport) -> None:
        """TLS: the connection was accepted, its TLS handshake not yet done; count it in now.

        A connection refused here is answered 503 once its handshake is done
        (no HTTP can be spoken before), lingering meanwhile; with no room to
        linger it is dropped at once.
        """
        self._raw = transport
        guard = self.guard
        refusal = guard.admit(self, _address(transport))
        if refusal is None:
            self._begin()
            return
        self.phase = Phase.REFUSED
        if guard.lingering >= MAX_LINGERING:
            guard.note("refused")
            transport.abort()
            return
        guard.lingering += 1
        self._lingering = True
        self._refusal = refusal

    def raw_lost(self) -> None:
        """TLS: the connection ended, its handshake done or not."""
        self._ended()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self._raw is None:  # plain: accepted now
            self._raw = transport
            refusal = self.guard.admit(self, _address(transport))
            if refusal is not None:
                self.transport = transport
                self._refuse(refusal)
                return
            self._made = True
            super().connection_made(transport)
            self._begin()
            return
        # TLS, handshake done: counted (and under the deadline) since accept.
        if self._refusal is not None:
            self.transport = transport
            self._refuse(self._refusal)
            return
        self._made = True
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        limit = self.guard.max_head_size
        while True:
            phase = self.phase
            if phase is Phase.REFUSED:
                self._lingered += len(data)
                if self._lingered > LINGER_BYTES:
                    self._raw_transport().abort()
                return
            if phase is Phase.UPGRADED:  # what followed an upgrade cut at the head limit
                upgraded = self.transport.get_protocol()
                if upgraded is not self and data and isinstance(upgraded, asyncio.Protocol):
                    upgraded.data_received(data)
                return
            if phase is not Phase.HEAD or limit is None:
                super().data_received(data)
                return
            # The parser gets the head up to the limit and no more: a head that is not
            # complete by then is answered 431, whatever the rest would have been.
            room = limit - self._head_bytes
            if room <= 0:
                self._head_too_large(limit)
                return
            part, data = data[:room], data[room:]
            self._head_bytes += len(part)
            super().data_received(part)
            if not data or self.transport.is_closing():
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()
        if self._made:
            super().connection_lost(exc)

    def _ended(self) -> None:
        """The connection ended (called once or twice with TLS): release what it holds."""
        if self._lingering:
            self._lingering = False
            self.guard.lingering -= 1
        if self.phase is not Phase.UPGRADED:
            self.finish()

    # ------------------------------------------------------------------ parser events

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.phase is Phase.IDLE:  # the next request on a kept-alive connection
            self._begin()

    def on_headers_complete(self) -> None:
        if self.phase is Phase.HEAD:
            self.phase = Phase.BODY
            self.guard.unpend(self)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if self.phase is Phase.BODY and not self.parser.should_upgrade():
            self.phase = Phase.IDLE
            self._cancel_deadline()

    def handle_websocket_upgrade(self) -> None:
        refusal = self.guard.upgrade_refusal(self)
        if refusal is not None:
            self._refuse(refusal)
            return
        self.phase = Phase.UPGRADED
        super().handle_websocket_upgrade()
        upgraded = self.transport.get_protocol()
        if hasattr(upgraded, "guard_owner"):
            upgraded.guard_owner = self
            self._upgraded = upgraded
        # Bytes that came in the same read as the request's end (a client that did not
        # wait for the 101) go to the WebSocket protocol as if read next; uvicorn drops them.
        early = self._tap.take_upgrade_data()
        if early and upgraded is not self and isinstance(upgraded, asyncio.Protocol):
            upgraded.data_received(early)

    # ------------------------------------------------------------------ deadline, refusal, end

    def _begin(self) -> None:
        self.phase = Phase.HEAD
        self._head_bytes = 0
        self.guard.pend(self)
        timeout = self.guard.handshake_timeout
        if timeout is not None:
            self._cancel_deadline()
            self._deadline = self.loop.call_later(timeout, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        phase = self.phase
        if phase is Phase.UPGRADED:
            if getattr(self._upgraded, "handshake_complete", True):
                return
        elif phase not in (Phase.HEAD, Phase.BODY):
            return
        self.guard.note("timed_out")
        self.finish()
        self._raw_transport().abort()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, message: str) -> None:
        """Answer 503 with `message`, then close (:meth:`_close_with`)."""
        self.guard.note("refused")
        self._close_with(refusal_response(message))

    def _head_too_large(self, limit: int) -> None:
        """Answer 431 (the head passed `limit` bytes), then close (:meth:`_close_with`)."""
        self.guard.note("too_large")
        self._close_with(head_too_large_response(limit))

    def _close_with(self, answer: bytes) -> None:
        """Release the connection's counts, write `answer` and close; meanwhile read and drop
        what the client still sends, briefly, so that it reads the answer, not a reset."""
        self.finish()
        self.phase = Phase.REFUSED
        guard = self.guard
        transport = self.transport
        transport.write(answer)
        if not self._lingering and guard.lingering < MAX_LINGERING:
            guard.lingering += 1
            self._lingering = True
        if self._lingering and transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, transport.close)
            return
        transport.close()
        raw = self._raw_transport()
        if raw is not transport:  # TLS has no half-close; its closing handshake is bounded
            self.loop.call_later(LINGER_SECONDS, raw.abort)

    def _raw_transport(self) -> asyncio.Transport:
        """The plain transport: the TLS layer's own with TLS, which aborting ends at once."""
        assert self._raw is not None
        return self._raw

    def abort(self) -> None:
        """Shed: drop the connection at once (its counts are already released)."""
        self._cancel_deadline()
        self._raw_transport().abort()

    def finish(self) -> None:
        """The connection ended (or is ending): release its counts and deadline."""
        self._cancel_deadline()
        self.guard.release(self)


def _address(transport: asyncio.BaseTransport) -> str:
    peername = transport.get_extra_info("peername")
    if isinstance(peername, tuple | list) and peername:
        return str(peername[0])
    return "local"  # a Unix socket: one peer


def guarded(guard: ConnectionGuard) -> type[GuardedProtocol]:
    """An HTTP protocol class for uvicorn (``Config(http=...)``) enforcing `guard`."""
    return type("GuardedProtocol", (GuardedProtocol,), {"guard": guard})


class _UpgradeAwareParser:
    """An httptools request parser that keeps what follows an upgrade request in its read."""

    __slots__ = ("_parser", "_upgrade_data")

    def __init__(self, parser: Any) -> None:
        self._parser = parser
        self._upgrade_data = b""

    def feed_data(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            offset = exc.args[0] if exc.args and isinstance(exc.args[0], int) else len(data)
            self._upgrade_data = bytes(data[offset:])
            raise

    def take_upgrade_data(self) -> bytes:
        """What followed the upgrade request in its read (once), or b""."""
        data, self._upgrade_data = self._upgrade_data, b""
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._parser, name)
