"""A kept-alive HTTP/1.1 client connection on a blocking socket, built for latency.

Each request is one ``sendall`` of the head and body together (two segments
would cost the server a second read, and a round trip with Nagle), and each
reply is read with ``recv_into``: the head into a reusable buffer, the body
into a fresh buffer of its ``Content-Length`` (the caller's arrays view it).
``Transfer-Encoding: chunked`` and bodies delimited by the connection's close
are read too. A connection the server closed while idle (its keep-alive
timeout) is noticed before sending and reopened, so no request is lost to it.
"""

from __future__ import annotations

import select
import socket
import ssl

from ..errors import PayloadTooBig, ProtocolError, RequestTimeout, ServerUnavailable

__all__ = ["HTTPConnection"]

_HEAD_LIMIT = 64 << 10
_BUFFER = 1 << 16


class _Closed(Exception):
    """The server closed the connection in the middle of a reply."""


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
        self._buf = bytearray(_BUFFER)

    def _fresh(self, timeout: float | None) -> socket.socket:
        sock = self._sock
        if sock is not None:
            # An idle kept-alive connection is readable only when the server closed it.
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                self.close()
                sock = None
        if sock is None:
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                context = ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
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
        """
        payload = body or b""
        head = f"{method} {path} HTTP/1.1\r\n{self._fixed}Content-Length: {len(payload)}\r\n\r\n"
        try:
            sock = self._fresh(timeout)
            sock.sendall(head.encode("latin-1") + payload)
            status, headers, data = self._response(sock, max_size)
        except TimeoutError:
            self.close()
            raise RequestTimeout(
                f"no reply to {method} {path} within {timeout} s from {self.host}:{self.port}"
            ) from None
        except (OSError, _Closed) as exc:
            self.close()
            raise ServerUnavailable(
                f"HTTP request to {self.scheme}://{self.host}:{self.port}{path} failed "
                f"({type(exc).__name__}: {exc or 'connection closed'}); is the server running?"
            ) from None
        except (PayloadTooBig, ProtocolError):
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers.get("content-type", ""), data

    def _response(
        self, sock: socket.socket, max_size: int
    ) -> tuple[int, dict[str, str], bytearray]:
        buf = self._buf
        view = memoryview(buf)
        n = 0
        while (end := buf.find(b"\r\n\r\n", 0, n)) < 0:
            if n == len(buf):
                raise ProtocolError(f"the reply's head is longer than {_HEAD_LIMIT} bytes")
            got = sock.recv_into(view[n:])
            if not got:
                raise _Closed("the server closed the connection")
            n += got
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"the reply is not HTTP/1.1: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        rest = bytes(buf[end + 4 : n])
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise ProtocolError(f"the reply's Content-Length {length!r} is not a number")
            data = self._exact(sock, rest, int(length), max_size)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            data = self._chunked(sock, rest, max_size)
        else:
            data = self._to_close(sock, rest, max_size)
            headers["connection"] = "close"
        return int(parts[1]), headers, data

    @staticmethod
    def _exact(sock: socket.socket, start: bytes, length: int, max_size: int) -> bytearray:
        if length > max_size:
            raise PayloadTooBig(length, max_size)
        data = bytearray(length)
        have = min(len(start), length)
        data[:have] = start[:have]
        view = memoryview(data)
        while have < length:
            got = sock.recv_into(view[have:])
            if not got:
                raise _Closed("the server closed the connection in the middle of a reply")
            have += got
        return data

    def _chunked(self, sock: socket.socket, start: bytes, max_size: int) -> bytearray:
        reader = _Reader(sock, start)
        data = bytearray()
        while True:
            size_line = reader.line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_line[:20]!r} in the reply") from None
            if size == 0:
                while reader.line():  # trailers, up to the empty line
                    pass
                return data
            if len(data) + size > max_size:
                raise PayloadTooBig(len(data) + size, max_size)
            data += reader.exact(size)
            reader.line()

    @staticmethod
    def _to_close(sock: socket.socket, start: bytes, max_size: int) -> bytearray:
        data = bytearray(start)
        while chunk := sock.recv(_BUFFER):
            data += chunk
            if len(data) > max_size:
                raise PayloadTooBig(len(data), max_size)
        return data

    def close(self) -> None:
        """Close the socket (the next request opens a new one)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class _Reader:
    """Buffered reads of lines and exact sizes (for chunked replies)."""

    def __init__(self, sock: socket.socket, start: bytes) -> None:
        self._sock = sock
        self._buf = bytearray(start)

    def _more(self) -> None:
        chunk = self._sock.recv(_BUFFER)
        if not chunk:
            raise _Closed("the server closed the connection in the middle of a reply")
        self._buf += chunk

    def line(self) -> bytes:
        while (i := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > _HEAD_LIMIT:
                raise ProtocolError("a line of the chunked reply is too long")
            self._more()
        out = bytes(self._buf[:i])
        del self._buf[: i + 2]
        return out

    def exact(self, size: int) -> bytes:
        while len(self._buf) < size:
            self._more()
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out
