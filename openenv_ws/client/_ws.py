"""A blocking RFC 6455 WebSocket client on a plain socket, built for latency.

The step path of the synchronous client is: one ``sendall`` of a small masked
frame, then ``recv_into`` straight into a reusable buffer until the reply is
complete, then decode from a view of that buffer. No thread hop, no per-message
buffer allocation, no extra copy of the payload. Reads are resumable: a timeout
in the middle of a frame keeps what was read, so the next read continues it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar
from urllib.parse import SplitResult, urlsplit

from ..errors import (
    ProtocolError,
    RequestTimeout,
    ServerUnavailable,
    SessionClosed,
    TLSError,
)
from ..protocol import native_wire
from ..wire.framing import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    Assembler,
    FrameError,
    close_payload,
    parse_close,
    parse_head,
    serialize,
)
from ..wire.handshake import check_handshake_answer, handshake_request
from ._idle import CallGuard
from ._tls import looks_like_tls, plain_to_tls, tls_error

__all__ = ["NOT_READY", "BlockingWebSocket", "normalize_url"]

_INITIAL_BUFFER = 1 << 18
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


class ConnectionFacts:
    """What both client WebSockets tell about their connection."""

    def __init__(self, url: str, max_size: int) -> None:
        self.url = url
        self.max_size = max_size
        #: The handshake answer's headers (lower-case names).
        self.response_headers: dict[str, str] = {}
        self.closed = False
        self.close_code: int | None = None
        self.close_reason = ""


def endpoint(url: str) -> tuple[SplitResult, bool, str, int]:
    """A ws(s) URL's parts, whether it is secure, and the host and port to connect to."""
    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    return parts, secure, parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)


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
        super().__init__(url, max_size)
        self.busy_poll = busy_poll
        self.guard = guard if guard is not None else CallGuard()
        # Messages read between calls (serve_idle), oldest first, for the next call.
        self._unclaimed: collections.deque[bytes] = collections.deque()
        self._unclaimed_size = 0
        parts, secure, host, port = endpoint(url)
        self._timeout: float | None = open_timeout
        try:
            sock = socket.create_connection((host, port), timeout=open_timeout)
        except OSError as exc:
            raise ServerUnavailable(
                f"cannot connect to {host}:{port} ({exc}); is the server running at {url}?"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if secure:
            sock = _tls_handshake(sock, ssl_context, host, url)
        self._sock = sock
        self._secure = secure
        self._buf = bytearray(_INITIAL_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._assembler = Assembler(max_size)
        self._nowait = False
        try:
            self._handshake(
                parts.netloc,
                (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                headers or {},
            )
        except BaseException:
            self._abort()
            raise
        self._timeout = -1.0  # the handshake's timeout mode; the first read sets its own

    # ------------------------------------------------------------------ handshake

    def _handshake(self, netloc: str, target: str, headers: Mapping[str, str]) -> None:
        request, key = handshake_request(netloc, target, headers)
        try:
            self._sock.sendall(request)
            head = self._read_http_head()
        except TimeoutError:
            raise ServerUnavailable(
                f"no WebSocket handshake answer from {self.url} in time"
            ) from None
        except (ServerUnavailable, TLSError):
            raise
        except OSError as exc:
            raise ServerUnavailable(f"WebSocket handshake with {self.url} failed: {exc}") from None
        self.response_headers = check_handshake_answer(head, key, self.url)

    def _read_http_head(self) -> str:
        while True:
            end = self._buf.find(b"\r\n\r\n", 0, self._end)
            if end >= 0:
                head = bytes(self._buf[:end]).decode("latin-1")
                self._start = end + 4
                return head
            if self._end > 65536:
                raise ProtocolError("the handshake answer headers exceed 64 KiB")
            n = self._sock.recv_into(self._view[self._end :])
            if n == 0:
                hint = "" if self._secure else "; if it serves TLS, connect with wss://"
                raise ServerUnavailable(
                    f"{self.url} closed the connection during the handshake{hint}"
                )
            if not self._secure and self._end == 0 and looks_like_tls(self._view[:n]):
                raise plain_to_tls(self.url)
            self._end += n

    # ------------------------------------------------------------------ I/O

    def _set_timeout(self, timeout: float | None) -> None:
        if timeout == self._timeout:
            return
        self._timeout = timeout
        if timeout == 0.0 or self._secure:
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
        if self.closed:
            raise SessionClosed(self.close_code, self.close_reason or "the connection is closed")
        frame = serialize(opcode, data, mask=True)
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
            self._lost(f"sending failed: {exc}")

    def exchange(self, request: bytes | None, *, timeout: float | None) -> tuple[Any, ...] | None:
        """Send `request` (None: nothing) and read one reply in C if it is a plain
        ``result`` (see ``openenv_ws/_wire.c``): its decoded fields, or None when the
        reply is anything else, left for :meth:`recv`.

        Without the C module, or on TLS, this is :meth:`send` and None.
        """
        if (
            native_wire is None
            or self._secure
            or self.closed
            or self._unclaimed
            or self._assembler.active
            or timeout == 0.0
            or (request is not None and len(request) > _MAX_NATIVE_REQUEST)
        ):
            if request is not None:
                self.send(request)
            return None
        self._set_timeout(timeout)
        out: tuple[Any, ...]
        self._start, self._end, out = native_wire.exchange(
            self._buf,
            self._start,
            self._end,
            self._sock.fileno(),
            request,
            self.busy_poll,
            self.max_size,
        )
        status = out[0]
        if status == native_wire.OK:
            return out
        if status == native_wire.RAISED:
            raise out[1]
        if status == native_wire.TIMEOUT:
            raise self._timed_out()
        if status == native_wire.SEND_FAILED:
            self._lost(f"sending failed: {OSError(out[1], os.strerror(out[1]))}")
        if status == native_wire.RECV_FAILED:
            self._lost(f"receiving failed: {OSError(out[1], os.strerror(out[1]))}")
        return None

    def _timed_out(self) -> RequestTimeout:
        return RequestTimeout(
            f"no reply within {self._timeout} s; the request may still complete, "
            "its late reply will be discarded"
        )

    def _fill(self, n: int) -> None:
        """Make at least `n` unread bytes available in the buffer."""
        while self._end - self._start < n:
            if self._start + n > len(self._buf):
                self._compact(n)
            try:
                if self._nowait:
                    got = self._read_nowait()
                else:
                    got = self._spin() if self.busy_poll else -1
                    if got < 0:
                        got = self._sock.recv_into(self._view[self._end :])
            except (TimeoutError, BlockingIOError):
                # BlockingIOError here is SO_RCVTIMEO expiring on a blocking read.
                raise self._timed_out() from None
            except OSError as exc:
                self._lost(f"receiving failed: {exc}")
            if got == 0:
                self._lost("the server closed the connection without a close frame")
            self._end += got

    def _spin(self) -> int:
        """Read without sleeping for up to ``busy_poll`` seconds; -1 if nothing came."""
        sock, view, end = self._sock, self._view, self._end
        deadline = time.perf_counter() + self.busy_poll
        if self._secure:  # an SSLSocket takes no flags: non-blocking for the spin
            sock.settimeout(0.0)
            try:
                while True:
                    try:
                        return sock.recv_into(view[end:])
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        if time.perf_counter() > deadline:
                            return -1
            finally:
                sock.settimeout(self._timeout)
        while True:
            try:
                return sock.recv_into(view[end:], 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() > deadline:
                    return -1

    def _read_nowait(self) -> int:
        try:
            return self._sock.recv_into(self._view[self._end :])
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise _NotReady from None

    def _compact(self, need: int) -> None:
        pending = self._end - self._start
        if need > len(self._buf):
            buf = bytearray(max(need, 2 * len(self._buf)))
            buf[:pending] = self._view[self._start : self._end]
            self._view.release()
            self._buf = buf
            self._view = memoryview(buf)
        else:
            self._buf[:pending] = self._buf[self._start : self._end]
        self._start, self._end = 0, pending

    def recv(self, handler: Callable[[memoryview], T], *, timeout: float | None) -> T:
        """Receive one data message and return ``handler(view_of_message)``.

        The view is only valid during the call. Control frames are answered
        in passing (ping -> pong) and a close frame raises :class:`SessionClosed`.
        """
        if self._unclaimed:
            data = self._unclaimed.popleft()
            self._unclaimed_size -= len(data)
            return handler(memoryview(data))
        if self.closed:
            raise SessionClosed(self.close_code, self.close_reason or "the connection is closed")
        self._set_timeout(timeout)
        return self._next_message(handler)

    def _next_message(self, handler: Callable[[memoryview], T]) -> T:
        while True:
            try:
                head = parse_head(self._buf, self._start, self._end, False, self.max_size)
            except FrameError as exc:
                self._fail(exc.code, exc.reason)
            if head is None or head[2] > self._end:
                # Read on (the offsets may move), then parse the frame again.
                self._fill(self._end - self._start + 1 if head is None else head[2] - self._start)
                continue
            first, begin, stop = head
            payload = self._view[begin:stop]
            try:
                if first == 0x82 and not self._assembler.active:  # final binary: the common case
                    return handler(payload)
                opcode = first & 0x0F
                if opcode < OP_CLOSE:
                    message = self._assemble(opcode, first & 0x80, payload)
                    if message is not None:
                        return handler(memoryview(message))
                elif opcode == OP_PING:
                    self.send(bytes(payload), opcode=OP_PONG)
                elif opcode == OP_CLOSE:
                    self._on_close(bytes(payload))
            finally:
                payload.release()
                self._start = stop

    def serve_idle(self) -> None:
        """Read what arrived while no call was reading, without waiting: answer pings,
        take a close frame, keep messages (a late reply, the server's last error)
        for the next call. Only with :attr:`guard`'s lock held.

        Raises:
            SessionClosed: the server closed the connection, or it dropped.
            ProtocolError: the server broke RFC 6455, or sent more unasked
                messages than the client's message size limit.
        """
        if self.closed:
            return
        self._set_timeout(0.0)
        self._nowait = True
        try:
            while True:
                data = self._next_message(bytes)
                self._unclaimed.append(data)
                self._unclaimed_size += len(data)
                if self._unclaimed_size > self.max_size:
                    self._fail(1009, "the server sent more unasked messages than the client keeps")
        except _NotReady:
            pass
        finally:
            self._nowait = False

    def take_unclaimed(self) -> list[bytes]:
        """The messages :meth:`serve_idle` kept and no call has read yet (now removed)."""
        out = list(self._unclaimed)
        self._unclaimed.clear()
        self._unclaimed_size = 0
        return out

    def fileno(self) -> int:
        """The socket's file descriptor, to wait on several connections with ``selectors``."""
        return self._sock.fileno()

    @property
    def buffered(self) -> int:
        """Bytes read from the socket and not yet consumed as messages (those
        :meth:`serve_idle` kept, and those the TLS layer holds decrypted, included:
        a wait on the descriptor would not see the latter)."""
        held = self._sock.pending() if self._secure else 0  # type: ignore[attr-defined]
        return self._end - self._start + self._unclaimed_size + held

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

    def _assemble(self, opcode: int, fin: int, payload: memoryview) -> bytes | None:
        try:
            whole = self._assembler.add(opcode, bool(fin), payload)
        except FrameError as exc:
            self._fail(exc.code, exc.reason)
        return None if whole is None else whole[1]

    def _on_close(self, payload: bytes) -> None:
        try:
            code, reason = parse_close(payload)
        except FrameError as exc:
            self._fail(exc.code, exc.reason)
        if not self.closed:
            with contextlib.suppress(OSError):
                self._sock.sendall(serialize(OP_CLOSE, payload[:2], mask=True))
        self.closed = True
        self.close_code, self.close_reason = code, reason
        self._abort()
        raise SessionClosed(code, reason)

    def _fail(self, code: int, reason: str) -> NoReturn:
        self.close(code, reason[:120])
        raise ProtocolError(reason)

    def _lost(self, reason: str) -> None:
        self.closed = True
        self.close_code, self.close_reason = None, reason
        self._abort()
        raise SessionClosed(None, reason)

    def close(self, code: int = 1000, reason: str = "", *, timeout: float = 2.0) -> None:
        """Send a close frame, wait briefly for the server's, and shut the socket. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.close_code, self.close_reason = code, reason
        try:
            self._sock.sendall(serialize(OP_CLOSE, close_payload(code, reason), mask=True))
            self._sock.settimeout(timeout)
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
