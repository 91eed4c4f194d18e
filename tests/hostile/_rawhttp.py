"""HTTP/1.1 over a bare socket: requests as an attacker writes them, answers read by hand."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "connect", "exchange", "read_answer", "request_bytes", "upgrade_bytes"]


@dataclass
class Answer:
    """An HTTP answer: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


def connect(host: str, port: int, *, source: str | None = None, timeout: float) -> socket.socket:
    """A TCP connection to `host`:`port`, from the loopback address `source` if given."""
    return socket.create_connection(
        (host, port), timeout=timeout, source_address=None if source is None else (source, 0)
    )


def request_bytes(method: str, path: str, host: str, *headers: str, body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *headers]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def upgrade_bytes(host: str, *headers: str, path: str = "/ws") -> bytes:
    """A complete WebSocket upgrade request naming `host`."""
    key = base64.b64encode(os.urandom(16)).decode()
    return request_bytes(
        "GET",
        path,
        host,
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *headers,
    )


def read_answer(sock: socket.socket, timeout: float) -> Answer:
    """Read one answer: its head, then its body (``content-length``; none after a 101).

    A reset or an end of stream before the head is complete raises ``ConnectionError``.
    """
    deadline = time.monotonic() + timeout
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += _recv(sock, deadline)
    head, _, buf = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines[1:])
    }
    if status == 101:
        return Answer(status, headers)
    size = int(headers.get("content-length", "0"))
    while len(buf) < size:
        buf += _recv(sock, deadline)
    return Answer(status, headers, buf[:size])


def exchange(
    host: str, port: int, request: bytes, *, source: str | None = None, timeout: float
) -> Answer:
    """Send `request` on a new connection and read the answer; the connection is closed."""
    with connect(host, port, source=source, timeout=timeout) as sock:
        sock.sendall(request)
        return read_answer(sock, timeout)


def _recv(sock: socket.socket, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no complete answer in time")
    sock.settimeout(left)
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("the server ended the connection without an answer")
    return chunk
