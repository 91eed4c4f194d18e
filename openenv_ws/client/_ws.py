"""A blocking RFC 6455 WebSocket client on a plain socket, built for latency.

The transport of a :class:`~._connection.ClientConnection` on a blocking
socket: it reads into the connection's buffer, writes what the connection
hands it, and adds the socket's parts (TLS, timeouts, busy polling, reads
between calls for the heartbeat keeper). The step path of the synchronous
client is: one ``sendall`` of a small masked frame, then ``recv_into`` straight
into the reusable buffer until the reply is complete, then decode from a view
of that buffer (in C where built: :meth:`BlockingWebSocket.exchange`). No
thread hop, no per-message buffer allocation, no extra copy of the payload.
Reads are resumable: a timeout in the middle of a frame keeps what was read,
so the next read continues it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from ..errors import RequestTimeout, ServerUnavailable, TLSError
from ..protocol import native_wire
from ..wire.framing import OP_BINARY
from ._connection import NEED_DATA, SEND, ClientConnection, ConnectionFacts, Signal
from ._idle import CallGuard
from ._tls import tls_error

__all__ = ["NOT_READY", "BlockingWebSocket", "normalize_url"]

_MAX_NATIVE_REQUEST = 4096  # requests the C exchange sends (a step is ~30 bytes)
T = TypeVar("T")


class _NotReady(Exception):
    """Raised inside a non-blocking read when the socket has no more bytes yet."""


#: What :meth:`BlockingWebSocket.recv_nowait` returns when no whole message is available.
NOT_READY: Any = type("_NotReadyType", (), {"__repr__": lambda self: "NOT_READY"})()


def normalize_url(url: str, path: str = "/ws") -> str:
    """Turn ``host:port``, ``http://host:port`` or ``ws://host:port[/path]`` into a ws URL."""
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None:
        raise ValueError(
            f"URL scheme '{parts.scheme}' is not supported; use ws://, wss://, http:// or https://"
        )
    if not parts.hostname:
        raise ValueError(f"URL '{url}' has no host")
    p = parts.path if parts.path not in ("", "/") else path
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{parts.netloc}{p}{query}"


class BlockingWebSocket(ConnectionFacts):
    """One client WebSocket connection with blocking, resumable I/O.

    Args:
        url: ``ws://`` or ``wss://`` URL.
        open_timeout: seconds for TCP connect plus handshake (None: no limit).
        headers: extra handshake headers (e.g. ``Authorization``).
        max_size: largest incoming message in bytes.
        busy_poll: seconds to spin on a non-blocking read before sleeping in
            the kernel while waiting for a reply. Spinning spends client CPU
            to skip the wake-up latency of a sleeping thread (tens of
            microseconds per reply on virtual machines); 0 disables it.
        guard: the lock and call count its callers hold and bump around each
            call, so that :func:`~openenv_ws.client._idle.keep_alive` can serve
            the connection between calls (default: a guard of its own).
        ssl_context: what a ``wss://`` connection verifies the server with
            (default: the system's CA store, host name checked).

    Over TLS every read goes through the :class:`ssl.SSLSocket` (the C
    exchange reads the raw descriptor, so it is not used), and bytes the TLS
    layer has decrypted but not handed out count as :attr:`buffered`.

    Raises:
        ServerUnavailable: nothing answers at `url`, or not a WebSocket server.
        TLSError: the TLS handshake failed (the message names the certificate
            problem), or the server expects TLS on a ``ws://`` URL.
    """

    def __init__(
        self,
        url: str,
        *,
        open_timeout: float | None = 10.0,
        headers: Mapping[str, str] | None = None,
        max_size: int = 64 << 20,
        busy_poll: float = 0.0,
        guard: CallGuard | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.connection = conn = ClientConnection(url, max_size)
        self.busy_poll = busy_poll
        self.guard = guard if guard is not None else CallGuard()
        self._timeout: float | None = open_timeout
        try:
            sock = socket.create_connection((conn.host, conn.port), timeout=open_timeout)
        except OSError as exc:
            raise conn.connect_failed(exc) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if conn.secure:
            sock = _tls_handshake(sock, ssl_context, conn.host, url)
        self._sock = sock
        self._nowait = False
        try:
            self._handshake(headers or {})
        except BaseException:
            self._abort()
            raise
        self._timeout = -1.0  # the handshake's timeout mode; the first read sets its own

    def _handshake(self, headers: Mapping[str, str]) -> None:
        conn = self.connection
        try:
            self._sock.sendall(conn.handshake_request(headers))
            while not conn.read_handshake():
                n = self._sock.recv_into(conn.room(conn.end - conn.start + 1))
                if n == 0:
                    raise conn.handshake_ended()
                conn.received(n)
        except (ServerUnavailable, TLSError):
            raise
        except OSError as exc:
            raise conn.handshake_failed(exc) from None

    # ------------------------------------------------------------------ I/O

    def _set_timeout(self, timeout: float | None) -> None:
        if timeout == self._timeout:
            return
        self._timeout = timeout
        if timeout == 0.0 or self.connection.secure:
            self._sock.settimeout(timeout)
            return
        # Blocking mode with kernel timeouts: Python's own timeouts wait in poll()
        # before every read (one more syscall per read, and a MSG_DONTWAIT read
        # would still sleep), while SO_RCVTIMEO makes the blocking read itself
        # give up with EAGAIN.
        self._sock.settimeout(None)
        seconds = 0.0 if timeout is None else max(timeout, 1e-6)
        tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)

    def send(self, data: bytes, *, opcode: int = OP_BINARY) -> None:
        """Send one message (a single masked frame)."""
        self._write(self.connection.send(data, opcode))

    def _write(self, frame: bytes) -> None:
        try:
            if self._timeout == 0.0:
                # Non-blocking since recv_nowait: write what fits, wait for the rest.
                try:
                    sent = self._sock.send(frame)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    sent = 0
                if sent == len(frame):
                    return
                frame = frame[sent:]
                self._set_timeout(None)
            self._sock.sendall(frame)
        except OSError as exc:
            self._lost(exc, sending=True)

    def exchange(self, request: bytes | None, *, timeout: float | None) -> tuple[Any, ...] | None:
        """Send `request` (None: nothing) and read one reply in C if it is a plain
        ``result`` (see ``openenv_ws/_wire.c``): its decoded fields, or None when the
        reply is anything else, left for :meth:`recv`.

        Without the C module, or on TLS, this is :meth:`send` and None.
        """
        conn = self.connection
        if (
            native_wire is None
            or conn.secure
            or not conn.between_messages
            or timeout == 0.0
            or (request is not None and len(request) > _MAX_NATIVE_REQUEST)
        ):
            if request is not None:
                self.send(request)
            return None
        self._set_timeout(timeout)
        out: tuple[Any, ...]
        conn.start, conn.end, out = native_wire.exchange(
            conn.buf,
            conn.start,
            conn.end,
            self._sock.fileno(),
            request,
            self.busy_poll,
            conn.max_size,
        )
        status = out[0]
        if status == native_wire.OK:
            return out
        if status == native_wire.RAISED:
            raise out[1]
        if status == native_wire.TIMEOUT:
            raise self._timed_out()
        if status == native_wire.SEND_FAILED:
            self._lost(OSError(out[1], os.strerror(out[1])), sending=True)
        if status == native_wire.RECV_FAILED:
            self._lost(OSError(out[1], os.strerror(out[1])))
        return None

    def _timed_out(self) -> RequestTimeout:
        return RequestTimeout(
            f"no reply within {self._timeout} s; the request may still complete, "
            "its late reply will be discarded"
        )

    def _fill(self, n: int) -> None:
        """Make at least `n` unread bytes available in the connection's buffer."""
        conn = self.connection
        while conn.end - conn.start < n:
            room = conn.room(n)
            try:
                if self._nowait:
                    got = self._read_nowait(room)
                else:
                    got = self._spin(room) if self.busy_poll else -1
                    if got < 0:
                        got = self._sock.recv_into(room)
            except (TimeoutError, BlockingIOError):
                # BlockingIOError here is SO_RCVTIMEO expiring on a blocking read.
                raise self._timed_out() from None
            except OSError as exc:
                self._lost(exc)
            finally:
                room.release()
            if got == 0:
                self._lost(None)
            conn.end += got

    def _spin(self, room: memoryview) -> int:
        """Read without sleeping for up to ``busy_poll`` seconds; -1 if nothing came."""
        sock = self._sock
        deadline = time.perf_counter() + self.busy_poll
        if self.connection.secure:  # an SSLSocket takes no flags: non-blocking for the spin
            sock.settimeout(0.0)
            try:
                while True:
                    try:
                        return sock.recv_into(room)
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        if time.perf_counter() > deadline:
                            return -1
            finally:
                sock.settimeout(self._timeout)
        while True:
            try:
                return sock.recv_into(room, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() > deadline:
                    return -1

    def _read_nowait(self, room: memoryview) -> int:
        try:
            return self._sock.recv_into(room)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise _NotReady from None

    def recv(self, handler: Callable[[memoryview], T], *, timeout: float | None) -> T:
        """Receive one data message and return ``handler(view_of_message)``.

        The view is only valid during the call. Control frames are answered
        in passing (ping -> pong) and a close frame raises :class:`SessionClosed`.
        """
        conn = self.connection
        if conn.kept:
            return handler(memoryview(conn.take_kept()))
        if conn.closed:
            raise conn.end_error()
        self._set_timeout(timeout)
        while True:
            out = conn.read_message(handler)
            if not isinstance(out, Signal):
                return out
            self._carry_out(out)

    def _carry_out(self, signal: Signal) -> None:
        """Do what the connection's `signal` asks: read more, send its pong, or end."""
        if signal is NEED_DATA:
            self._fill(self.connection.wanted)
        elif signal is SEND:
            self._write(self.connection.data_to_send())
        else:
            self._ended()

    def _ended(self) -> NoReturn:
        """The connection ended while reading (a close frame, a violation): send what
        it left to send, end the socket, raise why."""
        conn = self.connection
        self._shut(conn.data_to_send(), 2.0 if conn.waits_for_server else None)
        raise conn.end_error()

    def serve_idle(self) -> None:
        """Read what arrived while no call was reading, without waiting: answer pings,
        take a close frame, keep messages (a late reply, the server's last error)
        for the next call. Only with :attr:`guard`'s lock held.

        Raises:
            SessionClosed: the server closed the connection, or it dropped.
            ProtocolError: the server broke RFC 6455, or sent more unasked
                messages than the client's message size limit.
        """
        conn = self.connection
        if conn.closed:
            return
        self._set_timeout(0.0)
        self._nowait = True
        try:
            while True:
                self._carry_out(conn.read_into_kept())
        except _NotReady:
            pass
        finally:
            self._nowait = False

    def take_unclaimed(self) -> list[bytes]:
        """The messages :meth:`serve_idle` kept and no call has read yet (now removed)."""
        return self.connection.take_all_kept()

    def fileno(self) -> int:
        """The socket's file descriptor, to wait on several connections with ``selectors``."""
        return self._sock.fileno()

    @property
    def buffered(self) -> int:
        """Bytes read from the socket and not yet consumed as messages (those
        :meth:`serve_idle` kept, and those the TLS layer holds decrypted, included:
        a wait on the descriptor would not see the latter)."""
        conn = self.connection
        held = self._sock.pending() if conn.secure else 0  # type: ignore[attr-defined]
        return conn.buffered + held

    def recv_nowait(self, handler: Callable[[memoryview], T]) -> T | Any:
        """Like :meth:`recv`, but never wait: :data:`NOT_READY` if no whole message is here.

        Whatever the socket holds is read without blocking; an incomplete
        message stays buffered and the next call continues it.
        """
        # The socket stays non-blocking until a blocking call sets a timeout
        # again: a socket with a timeout waits in poll() even when asked not to.
        self._nowait = True
        try:
            return self.recv(handler, timeout=0.0)
        except _NotReady:
            return NOT_READY
        finally:
            self._nowait = False

    def _lost(self, exc: OSError | None, *, sending: bool = False) -> NoReturn:
        error = self.connection.lost(exc, sending=sending)
        self._abort()
        raise error

    def close(self, code: int = 1000, reason: str = "", *, timeout: float = 2.0) -> None:
        """Send a close frame, wait briefly for the server's, and shut the socket. Idempotent."""
        frame = self.connection.close(code, reason)
        if frame:
            self._shut(frame, timeout)

    def _shut(self, data: bytes, wait: float | None) -> None:
        """Send `data` (a close frame), then wait up to `wait` seconds (None: not at
        all) for the server to end the connection, and close the socket."""
        try:
            self._sock.sendall(data)
            if wait is not None:
                self._sock.settimeout(wait)
                self._sock.shutdown(socket.SHUT_WR)
                while self._sock.recv(65536):
                    pass
        except OSError:
            pass
        self._abort()

    def _abort(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _tls_handshake(
    sock: socket.socket, context: ssl.SSLContext | None, host: str, url: str
) -> ssl.SSLSocket:
    """`sock` wrapped in TLS, the handshake done within the socket's timeout.

    Raises:
        TLSError: the server's certificate failed verification, or it does not speak TLS.
        ServerUnavailable: the handshake did not finish in time, or the connection dropped.
    """
    if context is None:
        context = ssl.create_default_context()
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLError as exc:
        sock.close()
        raise tls_error(exc, url) from None
    except TimeoutError:
        sock.close()
        raise ServerUnavailable(f"no TLS handshake answer from {url} in time") from None
    except OSError as exc:
        sock.close()
        raise ServerUnavailable(f"the TLS handshake with {url} failed: {exc}") from None
