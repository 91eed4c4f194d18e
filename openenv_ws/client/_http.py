"""A kept-alive HTTP/1.1 client connection; replies are read by the standard
library's ``http.client`` (status line, headers, ``Content-Length``, chunked
bodies, bodies delimited by the connection's close).

Each request is one ``sendall`` of the head and body together: two segments
would cost the server a second read (``http.client``'s own request writer
sends them apart). A reply larger than the caller's limit is refused from its
``Content-Length`` before its body is read, a chunked one as soon as it grows
past the limit. A connection the server closed while idle (its keep-alive
timeout) is noticed before sending and reopened, so no request is lost to it.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl

from ..errors import PayloadTooBig, ProtocolError, RequestTimeout, ServerUnavailable

__all__ = ["HTTPConnection"]

_PIECE = 1 << 16  # bytes read at a time from a reply of unknown length


class HTTPConnection:
    """One HTTP/1.1 connection to ``scheme://host:port``, reopened when needed.

    Args:
        scheme: ``http`` or ``https``.
        host: the server's host name or address.
        port: the server's port.
        headers: header lines sent with every request (e.g. ``Accept``).
    """

    def __init__(self, scheme: str, host: str, port: int, headers: dict[str, str]) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        fixed = {"Host": f"{host}:{port}", **headers}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._sock: socket.socket | None = None

    @property
    def connected(self) -> bool:
        """Whether a socket is open (the next request reuses it)."""
        return self._sock is not None

    def fileno(self) -> int:
        """The open socket's descriptor (-1 when none is open)."""
        return -1 if self._sock is None else self._sock.fileno()

    def _fresh(self, timeout: float | None) -> socket.socket:
        sock = self._sock
        # An idle kept-alive connection is readable only when the server closed it.
        if sock is not None and select.select([sock], [], [], 0)[0]:
            self.close()
            sock = None
        if sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            if self.scheme == "https":
                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
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
    ) -> tuple[int, str, bytes]:
        """Send one request; (status, content type, body) of the reply.

        Raises:
            ServerUnavailable: the server cannot be reached or dropped the connection.
            RequestTimeout: no complete reply within `timeout` (the connection
                is closed, so a late reply is never read as another's).
            PayloadTooBig: the reply is larger than `max_size`.
            ProtocolError: the reply is not HTTP/1.1.
        """
        payload = body or b""
        head = f"{method} {path} HTTP/1.1\r\n{self._fixed}Content-Length: {len(payload)}\r\n\r\n"
        try:
            sock = self._fresh(timeout)
            # Head and body in one write: two segments would cost the server a second read.
            sock.sendall(head.encode("latin-1") + payload)
            reply = http.client.HTTPResponse(sock, method=method)
            try:
                reply.begin()
                data = _body(reply, max_size)
            finally:
                reply.close()  # the response's reader, not the socket
        except TimeoutError:
            self.close()
            raise RequestTimeout(
                f"no reply to {method} {path} within {timeout} s from {self.host}:{self.port}"
            ) from None
        except http.client.RemoteDisconnected:
            self.close()
            raise self._unavailable(path, "the server closed the connection") from None
        except http.client.IncompleteRead:
            self.close()
            raise self._unavailable(
                path, "the server closed the connection in the middle of a reply"
            ) from None
        except http.client.BadStatusLine as exc:
            self.close()
            raise ProtocolError(f"the reply is not HTTP/1.1: {str(exc)[:80]}") from None
        except http.client.HTTPException as exc:
            self.close()
            raise ProtocolError(f"the reply is not valid HTTP/1.1: {exc}") from None
        except OSError as exc:
            self.close()
            raise self._unavailable(path, f"{type(exc).__name__}: {exc}") from None
        except PayloadTooBig:
            self.close()
            raise
        if reply.will_close:
            self.close()
        return reply.status, reply.getheader("content-type", ""), data

    def _unavailable(self, path: str, why: str) -> ServerUnavailable:
        return ServerUnavailable(
            f"HTTP request to {self.scheme}://{self.host}:{self.port}{path} failed "
            f"({why}); is the server running?"
        )

    def close(self) -> None:
        """Close the socket (the next request opens a new one)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def _body(reply: http.client.HTTPResponse, max_size: int) -> bytes:
    """The reply's whole body, refused as soon as it is known to exceed `max_size`."""
    if reply.length is not None:
        if reply.length > max_size:
            raise PayloadTooBig(reply.length, max_size)
        return reply.read()
    # Chunked, or delimited by the connection's close: read piece by piece.
    data = bytearray()
    while piece := reply.read(_PIECE):
        data += piece
        if len(data) > max_size:
            raise PayloadTooBig(len(data), max_size)
    return bytes(data)
