"""An asyncio RFC 6455 WebSocket client (an ``asyncio.Protocol``), built for latency.

The asynchronous client's transport of a :class:`~._connection.ClientConnection`,
the counterpart of :mod:`._ws`: ``data_received`` feeds the connection and reads
whole messages there, so a complete message goes straight to the request
waiting for it (one future per reply) and pings are answered at once: the
connection stays alive between calls however far apart they are. Sending is
one ``transport.write`` of a masked frame.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import cast

from ..errors import OpenEnvError
from ..wire.framing import OP_BINARY
from ._connection import ENDED, SEND, ClientConnection, ConnectionFacts
from ._tls import tls_error

__all__ = ["AsyncWebSocket"]

_BUFFER = 1 << 16  # the receive buffer's first size (it grows for a larger frame)


class AsyncWebSocket(asyncio.Protocol, ConnectionFacts):
    """One client WebSocket connection on the running event loop.

    Make one with :meth:`connect`; :meth:`recv` returns whole data messages
    as bytes, in order, and raises :class:`SessionClosed` once the connection
    is gone (close frame or not).
    """

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        # Set once the handshake is answered, then None (a plain check per chunk after that).
        self._opening: asyncio.Future[None] | None = self._loop.create_future()
        self._waiter: asyncio.Future[None] | None = None
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
        loop = asyncio.get_running_loop()
        conn = ClientConnection(url, max_size, _BUFFER)
        if conn.secure and ssl_context is None:
            ssl_context = ssl.create_default_context()
        try:
            _, ws = await loop.create_connection(
                lambda: cls(conn),
                conn.host,
                conn.port,
                ssl=ssl_context if conn.secure else None,
                server_hostname=conn.host if conn.secure else None,
            )
        except ssl.SSLError as exc:
            raise tls_error(exc, url) from None
        except OSError as exc:
            raise conn.connect_failed(exc) from None
        opening = ws._opening
        assert opening is not None
        try:
            ws._write(ws.connection.handshake_request(headers or {}))
            await opening
        except BaseException:
            ws.abort()
            raise
        return ws

    # ------------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence the cast.
        self._transport = cast(asyncio.Transport, transport)  # TCP_NODELAY is set by the loop

    def data_received(self, data: bytes) -> None:
        conn = self.connection
        if conn.closed:
            return  # closing: nothing more is read
        conn.receive_data(data)
        opening = self._opening
        if opening is not None:
            try:
                if not conn.read_handshake():
                    return
            except OpenEnvError as exc:
                self._opening = None
                if not opening.done():
                    opening.set_exception(exc)
                return
            self._opening = None
            if not opening.done():
                opening.set_result(None)
        self._read()

    def _read(self) -> None:
        """Read every whole message received, answer pings, take a close frame."""
        conn = self.connection
        while (signal := conn.read_into_kept()) is SEND:
            self._write(conn.data_to_send())
        if signal is ENDED:
            self._write(conn.data_to_send())
            if self._transport is not None:
                self._transport.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.connection
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.set_exception(conn.handshake_ended())
        conn.lost(exc)
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

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ------------------------------------------------------------------ API

    async def recv(self) -> bytes:
        """The next data message; raise :class:`SessionClosed` once the connection is gone."""
        conn = self.connection
        while True:
            if conn.kept:
                return conn.take_kept()
            if conn.closed:
                raise conn.end_error()
            self._waiter = self._loop.create_future()
            await self._waiter

    async def send(self, data: bytes, *, opcode: int = OP_BINARY) -> None:
        """Send one message (a single masked frame)."""
        self._write(self.connection.send(data, opcode))
        if self._writable is not None:
            await asyncio.shield(self._writable)

    def _write(self, frame: bytes) -> None:
        transport = self._transport
        if frame and transport is not None and not transport.is_closing():
            transport.write(frame)

    async def close(self, code: int = 1000, reason: str = "", *, timeout: float = 2.0) -> None:
        """Send a close frame, wait briefly for the server to end the connection. Idempotent."""
        self._write(self.connection.close(code, reason))
        transport = self._transport
        if transport is not None and not self._gone.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._gone), timeout)
            except TimeoutError:
                transport.abort()

    def abort(self) -> None:
        """Drop the connection at once (no close handshake)."""
        self.connection.abort()
        if self._transport is not None:
            self._transport.abort()
