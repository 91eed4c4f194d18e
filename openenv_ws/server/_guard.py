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

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_PEER",
    "ConnectionGuard",
    "connection_cap",
    "fit_to_fd_limit",
    "guarded",
    "raise_fd_limit",
    "websocket_share",
]

#: Seconds a connection has to send its request (and have its upgrade accepted).
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
#: Connections a server process holds at once.
DEFAULT_MAX_CONNECTIONS = 4096
#: Connections one client address holds at once.
DEFAULT_MAX_CONNECTIONS_PER_PEER = 1024
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
            WebSocket upgrade); None: no deadline.
    """

    def __init__(
        self,
        *,
        max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
        max_per_peer: int | None = DEFAULT_MAX_CONNECTIONS_PER_PEER,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        for name, value in (("max_connections", max_connections), ("max_per_peer", max_per_peer)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or None), got {value}")
        if handshake_timeout is not None and handshake_timeout <= 0:
            raise ValueError(
                f"handshake_timeout must be positive (or None), got {handshake_timeout}"
            )
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.handshake_timeout = handshake_timeout
        self.connections = 0
        self.websockets = 0
        self.lingering = 0
        self.peers: dict[str, _Peer] = {}
        #: Connections sending a request head, oldest first.
        self.pending: dict[GuardedProtocol, None] = {}
        #: Totals since start: refused (503), shed (aborted for a newcomer), timed_out.
        self.counts = {"refused": 0, "shed": 0, "timed_out": 0}
        self._unreported = {"refused": 0, "shed": 0, "timed_out": 0}
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
        """Count a refusal, shed or timeout; warn about them at most every :data:`WARN_EVERY` s."""
        self.counts[what] += 1
        self._unreported[what] += 1
        now = time.monotonic()
        if now - self._warned < WARN_EVERY:
            return
        self._warned = now
        refused, shed, timed_out = (self._unreported[k] for k in ("refused", "shed", "timed_out"))
        self._unreported = dict.fromkeys(self._unreported, 0)
        logger.warning(
            "connection limits: %d connection(s) refused with 503, %d aborted to make room for "
            "new ones while still sending their request, %d aborted at the handshake deadline "
            "(%d open now; see --max-connections, --max-connections-per-peer, "
            "--handshake-timeout)",
            refused,
            shed,
            timed_out,
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


def refusal_response(message: str) -> bytes:
    """The bytes of a 503 answer saying `message`."""
    body = json.dumps({"error": "connection_limit", "message": message}).encode()
    return b"%scontent-length: %d\r\n\r\n%s" % (_REFUSED_HEAD, len(body), body)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a :class:`ConnectionGuard` (see :func:`guarded`)."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peer: _Peer | None = None
        self.address = ""
        self.phase = Phase.HEAD
        self._made = False  # uvicorn's connection_made ran
        self._deadline: asyncio.TimerHandle | None = None
        self._upgraded: Any = None
        self._lingered = 0  # bytes read and dropped after a refusal
        self._lingering = False
        if self.ws_protocol_class is not None:
            self.ws_protocol_class = self.guard.websocket_class(self.ws_protocol_class)
        self._tap = _UpgradeAwareParser(self.parser)
        self.parser = self._tap  # type: ignore[assignment]  # the same methods, delegated

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        refusal = self.guard.admit(self, _address(transport))
        if refusal is not None:
            self.transport = transport
            self._refuse(refusal)
            return
        self._made = True
        super().connection_made(transport)
        self._begin()

    def data_received(self, data: bytes) -> None:
        if self.phase is Phase.REFUSED:
            self._lingered += len(data)
            if self._lingered > LINGER_BYTES:
                self.transport.abort()
            return
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering:
            self._lingering = False
            self.guard.lingering -= 1
        if self.phase is not Phase.UPGRADED:
            self.finish()
        if self._made:
            super().connection_lost(exc)

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
        self.transport.abort()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, message: str) -> None:
        """Answer 503 with `message`; then read and drop what the client still sends, briefly."""
        guard = self.guard
        guard.note("refused")
        self.finish()
        self.phase = Phase.REFUSED
        transport = self.transport
        transport.write(refusal_response(message))
        if guard.lingering >= MAX_LINGERING or not transport.can_write_eof():
            transport.close()
            return
        guard.lingering += 1
        self._lingering = True
        transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, transport.close)

    def abort(self) -> None:
        """Shed: drop the connection at once (its counts are already released)."""
        self._cancel_deadline()
        self.transport.abort()

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
