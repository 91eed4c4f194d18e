"""A kept-alive HTTP/1.1 client connection; replies are parsed by ``httptools``
(llhttp, the parser uvicorn serves with): status line, headers,
``Content-Length``, chunked bodies, bodies delimited by the connection's close.

Each request is one ``sendall`` of the head and body together (two segments
would cost the server a second read). A reply larger than the caller's limit
is refused from its ``Content-Length`` before its body is read, a chunked one
as soon as it grows past the limit. A connection the server closed while
idle (its keep-alive timeout) is noticed before sending and reopened, so no
request is lost to it.
"""

from __future__ import annotations

import select
import socket
import ssl

import httptools

from ..errors import PayloadTooBig, ProtocolError, RequestTimeout, ServerUnavailable
from ._tls import tls_error

__all__ = ["HTTPConnection"]

_HEAD_LIMIT = 64 << 10
_PIECE = 1 << 16  # bytes read at a time


class _Closed(Exception):
    """The server closed the connection before its reply was complete."""


class HTTPConnection:
    """One HTTP/1.1 connection to ``scheme://host:port``, reopened when needed.

    Args:
        scheme: ``http`` or ``https``.
        host: the server's host name or address.
        port: the server's port.
        headers: header lines sent with every request (e.g. ``Accept``).
        ssl_context: what an ``https`` connection verifies the server with
            (default: the system's CA store, host name checked).
    """

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        headers: dict[str, str],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        fixed = {"Host": f"{host}:{port}", **headers}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._sock: socket.socket | None = None
        self._ssl: ssl.SSLContext | None = None
        if scheme == "https":
            self._ssl = ssl_context if ssl_context is not None else ssl.create_default_context()

    @property
    def connected(self) -> bool:
        """Whether a socket is open (the next request reuses it)."""
        return self._sock is not None

    def _fresh(self, timeout: float | None) -> socket.socket:
        sock = self._sock
        # An idle kept-alive connection is readable only when the server closed it.
        if sock is not None and select.select([sock], [], [], 0)[0]:
            self.close()
            sock = None
        if sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            if self._ssl is not None:
                try:
                    sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
                except BaseException:
                    sock.close()
                    raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
        else:
            sock.settimeout(timeout)
        return sock

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        timeout: float | None,
        max_size: int,
    ) -> tuple[int, str, bytearray]:
        """Send one request; (status, content type, body) of the reply.

        Raises:
            ServerUnavailable: the server cannot be reached or dropped the connection.
            RequestTimeout: no complete reply within `timeout` (the connection
                is closed, so a late reply is never read as another's).
            PayloadTooBig: the reply is larger than `max_size`.
            ProtocolError: the reply is not HTTP/1.1.
            TLSError: the server's certificate failed verification, or the
                server does not speak TLS (never retried: it is not transient).
        """
        payload = body or b""
        head = f"{method} {path} HTTP/1.1\r\n{self._fixed}Content-Length: {len(payload)}\r\n\r\n"
        reply = _Reply(max_size)
        try:
            sock = self._fresh(timeout)
            sock.sendall(head.encode("latin-1") + payload)
            reply.read(sock)
        except ssl.SSLError as exc:
            self.close()
            raise tls_error(exc, f"{self.scheme}://{self.host}:{self.port}{path}") from None
        except TimeoutError:
            self.close()
            raise RequestTimeout(
                f"no reply to {method} {path} within {timeout} s from {self.host}:{self.port}"
            ) from None
        except (OSError, _Closed) as exc:
            self.close()
            plain = self.scheme == "http" and isinstance(exc, _Closed)
            raise ServerUnavailable(
                f"HTTP request to {self.scheme}://{self.host}:{self.port}{path} failed "
                f"({type(exc).__name__}: {exc or 'connection closed'}); is the server running?"
                + (" (if it serves TLS, use https://)" if plain else "")
            ) from None
        except (PayloadTooBig, ProtocolError):
            self.close()
            raise
        if reply.close:
            self.close()
        return reply.status, reply.media, reply.body

    def close(self) -> None:
        """Close the socket (the next request opens a new one)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class _Reply:
    """One reply as the parser's callbacks see it, with this client's limits."""

    __slots__ = (
        "body",
        "chunked",
        "close",
        "complete",
        "length",
        "max_size",
        "media",
        "parser",
        "status",
    )

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.media = ""
        self.close = False  # the connection ends with this reply
        self.length: int | None = None  # the Content-Length
        self.chunked = False
        self.complete = False
        self.body = bytearray()

    def read(self, sock: socket.socket) -> None:
        """Read from `sock` until the reply is complete."""
        head = bytearray()
        while (end := head.find(b"\r\n\r\n")) < 0:
            if len(head) > _HEAD_LIMIT:
                raise ProtocolError(f"the reply's head is longer than {_HEAD_LIMIT} bytes")
            data = sock.recv(_PIECE)
            if not data:
                raise _Closed("the server closed the connection")
            head += data
        self._feed(memoryview(head)[: end + 4])
        rest = memoryview(head)[end + 4 :]
        if self.length is not None:
            # The body goes straight from the socket into its buffer.
            body = self.body = bytearray(self.length)
            have = min(len(rest), self.length)
            body[:have] = rest[:have]
            view = memoryview(body)
            while have < self.length:
                got = sock.recv_into(view[have:])
                if not got:
                    raise _Closed("the server closed the connection in the middle of a reply")
                have += got
            return
        if rest:
            self._feed(rest)
        while not self.complete:
            data = sock.recv(_PIECE)
            if not data:
                if not self.chunked:
                    self.close = True  # the body was delimited by the close
                    return
                raise _Closed("the server closed the connection in the middle of a reply")
            self._feed(data)

    def _feed(self, data: bytes | memoryview) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, (PayloadTooBig, ProtocolError)):
                raise exc.__context__ from None
            raise ProtocolError(f"the reply is not valid HTTP/1.1: {exc}") from None
        except httptools.HttpParserError as exc:
            raise ProtocolError(f"the reply is not HTTP/1.1: {exc}") from None

    # ------------------------------------------------------------------ parser callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.lower()
        if key == b"content-type":
            self.media = value.decode("latin-1")
        elif key == b"content-length":
            length = int(value)  # (llhttp has checked it is a number)
            if length > self.max_size:
                raise PayloadTooBig(length, self.max_size)
            self.length = length
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            self.chunked = True
        elif key == b"connection" and value.lower() == b"close":
            self.close = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self.body += body
        if len(self.body) > self.max_size:
            raise PayloadTooBig(len(self.body), self.max_size)

    def on_message_complete(self) -> None:
        self.complete = True
