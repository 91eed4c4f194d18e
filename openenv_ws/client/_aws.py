"""An asyncio RFC 6455 WebSocket client (an ``asyncio.Protocol``), built for latency.

The asynchronous client's counterpart of :mod:`._ws`: whole frames are parsed
in ``data_received`` and a complete message goes straight to the request
waiting for it (one future per reply), pings are answered there too, so the
connection stays alive between calls however far apart they are. Sending is
one ``transport.write`` of a masked frame. Handshake checks and framing are
shared with the blocking client.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Mapping
from typing import cast

from ..errors import ProtocolError, ServerUnavailable, SessionClosed
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
from ._tls import looks_like_tls, plain_to_tls, tls_error
from ._ws import ConnectionFacts, endpoint

__all__ = ["AsyncWebSocket"]

_MAX_HEAD = 65536


class AsyncWebSocket(asyncio.Protocol, ConnectionFacts):
    """One client WebSocket connection on the running event loop.

    Make one with :meth:`connect`; :meth:`recv` returns whole data messages
    as bytes, in order, and raises :class:`SessionClosed` once the connection
    is gone (close frame or not).
    """

    def __init__(self, url: str, max_size: int) -> None:
        ConnectionFacts.__init__(self, url, max_size)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()  # received bytes not parsed yet (the handshake answer first)
        self._assembler = Assembler(max_size)
        self._head: asyncio.Future[str] | None = self._loop.create_future()
        self._messages: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: ProtocolError | None = None
        self._writable: asyncio.Future[None] | None = None
        self._gone: asyncio.Future[None] = self._loop.create_future()

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        max_size: int = 64 << 20,
        ssl_context: ssl.SSLContext | None = None,
    ) -> AsyncWebSocket:
        """Connect and complete the handshake (wrap in a timeout for a limit).

        `ssl_context` is what a ``wss://`` connection verifies the server with
        (default: the system's CA store, host name checked).

        Raises:
            ServerUnavailable: no server, or it did not accept a WebSocket.
            TLSError: the TLS handshake failed (the message names the
                certificate problem), or the server expects TLS on a ``ws://`` URL.
            AuthError: the server refused the handshake (HTTP 401/403).
            ProtocolError: a malformed handshake answer.
        """
        parts, secure, host, port = endpoint(url)
        loop = asyncio.get_running_loop()
        if secure and ssl_context is None:
            ssl_context = ssl.create_default_context()
        try:
            _, ws = await loop.create_connection(
                lambda: cls(url, max_size),
                host,
                port,
                ssl=ssl_context if secure else None,
                server_hostname=host if secure else None,
            )
        except ssl.SSLError as exc:
            raise tls_error(exc, url) from None
        except OSError as exc:
            raise ServerUnavailable(
                f"cannot connect to {host}:{port} ({exc}); is the server running at {url}?"
            ) from None
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            request, key = handshake_request(parts.netloc, target, headers or {})
            assert ws._transport is not None and ws._head is not None
            ws._transport.write(request)
            head = await ws._head
            ws.response_headers = check_handshake_answer(head, key, url)
            ws._head = None
            ws._parse()  # frames that came with the answer
        except BaseException:
            ws.abort()
            raise
        return ws

    # ------------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast.
        self._transport = cast(asyncio.Transport, transport)  # TCP_NODELAY is set by the loop

    def data_received(self, data: bytes) -> None:
        self._buf += data
        head = self._head
        if head is None:
            self._parse()
        elif not head.done():  # else: frames after the answer wait until it is checked
            end = self._buf.find(b"\r\n\r\n")
            if looks_like_tls(self._buf[:3]) and not self.url.startswith("wss:"):
                head.set_exception(plain_to_tls(self.url))
            elif end >= 0:
                head.set_result(bytes(self._buf[:end]).decode("latin-1"))
                del self._buf[: end + 4]
            elif len(self._buf) > _MAX_HEAD:
                head.set_exception(ProtocolError("the handshake answer headers exceed 64 KiB"))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head is not None and not self._head.done():
            hint = "" if self.url.startswith("wss:") else "; if it serves TLS, connect with wss://"
            self._head.set_exception(
                ServerUnavailable(f"{self.url} closed the connection during the handshake{hint}")
            )
        if not self.closed:
            self._gone_with(None, f"the connection dropped ({exc or 'no close frame'})")
        if not self._gone.done():
            self._gone.set_result(None)
        self.resume_writing()
        self._wake()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # ------------------------------------------------------------------ frames in

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        try:
            while not self.closed:
                head = parse_head(buf, pos, len(buf), False, self.max_size)
                if head is None or head[2] > len(buf):
                    break
                first, start, pos = head
                with memoryview(buf) as view:  # one copy of the payload, not two
                    payload = bytes(view[start:pos])
                if first == 0x82 and not self._assembler.active:  # final binary: the common case
                    self._messages.append(payload)
                else:
                    self._frame(first, payload)
        except FrameError as exc:
            self._fail(exc.code, exc.reason)
        finally:
            del buf[:pos]
            self._wake()

    def _frame(self, first: int, payload: bytes) -> None:
        opcode = first & 0x0F
        if opcode < OP_CLOSE:
            whole = self._assembler.add(opcode, first > 0x7F, payload)
            if whole is not None:
                self._messages.append(whole[1])
        elif opcode == OP_PING:
            self._write(serialize(OP_PONG, payload, mask=True))
        elif opcode == OP_CLOSE:
            code, reason = parse_close(payload)
            self._write(serialize(OP_CLOSE, payload[:2], mask=True))
            self._gone_with(code, reason)
            if self._transport is not None:
                self._transport.close()

    def _fail(self, code: int, reason: str) -> None:
        """Close with `code` for a violation by the server; the waiting request gets it."""
        self._write(serialize(OP_CLOSE, close_payload(code, reason), mask=True))
        if self._transport is not None:
            self._transport.close()
        self._error = ProtocolError(reason)
        self._gone_with(code, reason)

    def _gone_with(self, code: int | None, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self.close_code, self.close_reason = code, reason

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ API

    async def recv(self) -> bytes:
        """The next data message; raise :class:`SessionClosed` once the connection is gone."""
        while True:
            if self._messages:
                return self._messages.popleft()
            if self.closed:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise SessionClosed(
                    self.close_code, self.close_reason or "the connection is closed"
                )
            self._waiter = self._loop.create_future()
            await self._waiter

    async def send(self, data: bytes, *, opcode: int = OP_BINARY) -> None:
        """Send one message (a single masked frame)."""
        if self.closed:
            raise SessionClosed(self.close_code, self.close_reason or "the connection is closed")
        self._write(serialize(opcode, data, mask=True))
        if self._writable is not None:
            await asyncio.shield(self._writable)

    def _write(self, frame: bytes) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(frame)

    async def close(self, code: int = 1000, reason: str = "", *, timeout: float = 2.0) -> None:
        """Send a close frame, wait briefly for the server to end the connection. Idempotent."""
        if not self.closed:
            self._gone_with(code, reason)
            self._write(serialize(OP_CLOSE, close_payload(code, reason), mask=True))
        transport = self._transport
        if transport is not None and not self._gone.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._gone), timeout)
            except TimeoutError:
                transport.abort()

    def abort(self) -> None:
        """Drop the connection at once (no close handshake)."""
        self._gone_with(None, "the connection was aborted")
        if self._transport is not None:
            self._transport.abort()
