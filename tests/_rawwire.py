"""The raw wire for tests: HTTP/1.1, WebSocket frames and protocol v1 over a bare socket.

What well-behaved clients never send, written by hand: requests as an
attacker writes them (answers read by hand), a WebSocket driven frame by
frame (it never answers pings on its own, never fragments unless told to and
masks only when asked, so tests can play a frozen peer or a broken one), and
protocol v1 requests over such a connection.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from openenv_ws.protocol import Error, Open, Reset, Step, decode_server_frame, encode
from openenv_ws.wire.framing import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameReader,
    apply_mask,
    frame_head,
    parse_close,
    serialize,
)

from .conftest import UNIT

__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONT",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "Answer",
    "RawWS",
    "connect",
    "exchange",
    "frame_bytes",
    "masked",
    "open_session",
    "read_answer",
    "reply",
    "request",
    "request_bytes",
    "step",
    "upgrade_bytes",
]

# HTTP/1.1


@dataclass
class Answer:
    """An HTTP answer: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


def connect(host: str, port: int, *, source: str | None = None, timeout: float) -> socket.socket:
    """A TCP connection to `host`:`port`, from the loopback address `source` if given.

    Without `source` it is ``socket.create_connection((host, port), timeout=...)``
    exactly, so a test that patches ``socket.create_connection`` sees its calls.
    """
    if source is None:
        return socket.create_connection((host, port), timeout=timeout)
    return socket.create_connection((host, port), timeout=timeout, source_address=(source, 0))


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


def _read_head(sock: socket.socket, deadline: float) -> tuple[int, dict[str, str], bytes, bytes]:
    """An answer's head: (status, headers, the head's bytes, the bytes read past it)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += _recv(sock, deadline)
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in lines[1:])
    }
    return int(lines[0].split(" ", 2)[1]), headers, head, rest


def read_answer(sock: socket.socket, timeout: float) -> Answer:
    """Read one answer: its head, then its body (``content-length``; none after a 101).

    A reset or an end of stream before the head is complete raises ``ConnectionError``.
    """
    deadline = time.monotonic() + timeout
    status, headers, _, buf = _read_head(sock, deadline)
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


# WebSocket frames


def frame_bytes(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    mask: bool = True,
    length: int | None = None,
) -> bytes:
    """One WebSocket frame; `length` overrides the declared payload length."""
    if length is None:
        return serialize(opcode, payload, mask=mask, fin=fin, rsv=rsv)
    key = os.urandom(4) if mask else b""
    head = frame_head(opcode, length, fin=fin, rsv=rsv, key=key)
    return head + (apply_mask(payload, key) if mask else payload)


def masked(payload: bytes) -> bytes:
    """A final, masked binary frame carrying `payload`."""
    return serialize(OP_BINARY, payload, mask=True)


class RawWS:
    """A handshaken WebSocket connection driven frame by frame."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        path: str = "/ws",
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.sock = connect(host, port, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        extra = [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(upgrade_bytes(f"{host}:{port}", *extra, path=path))
        try:
            status, headers_in, head, rest = _read_head(self.sock, time.monotonic() + timeout)
        except BaseException:
            self.sock.close()
            raise
        #: The handshake answer's status and headers (lower-case names).
        self.status = status
        self.headers = headers_in
        if self.status != 101:
            self.sock.close()
            raise ConnectionError(f"handshake refused: {head.decode(errors='replace')}")
        self.sock.settimeout(timeout)
        # The server's frames, read as they come: no checks but the framing itself.
        self._reader = FrameReader(masked=False)
        self._reader.feed(rest)

    @classmethod
    def to(cls, url: str, **kwargs: Any) -> RawWS:
        host, _, rest = url.removeprefix("ws://").partition(":")
        port = int(rest.split("/", 1)[0])
        return cls(host, port, **kwargs)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, payload: bytes, opcode: int = OP_BINARY, **kwargs: object) -> None:
        self.sock.sendall(frame_bytes(opcode, payload, **kwargs))  # type: ignore[arg-type]

    def read_frame(self, timeout: float) -> tuple[int, bytes]:
        """The next frame (opcode, payload); TimeoutError, or EOFError when the socket ends.

        A frame cut short by the timeout stays buffered for the next call.
        """
        deadline = time.monotonic() + timeout
        while (frame := self._reader.next_frame()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self._reader.feed(chunk)
        return frame.opcode, frame.payload

    def frames_now(self) -> list[tuple[int, bytes]]:
        """The whole frames (opcode, payload) the socket holds now, without waiting."""
        self.sock.setblocking(False)
        try:
            while chunk := self.sock.recv(1 << 16):
                self._reader.feed(chunk)
        except BlockingIOError:
            pass
        finally:
            self.sock.setblocking(True)
        frames = []
        while (frame := self._reader.next_frame()) is not None:
            frames.append((frame.opcode, frame.payload))
        return frames

    def until_close(self, timeout: float) -> tuple[list[bytes], int | None]:
        """Data messages until the server's close frame: (payloads, close code or None)."""
        messages: list[bytes] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                opcode, payload = self.read_frame(max(0.0, deadline - time.monotonic()))
            except (EOFError, ConnectionError):
                return messages, None
            if opcode == OP_CLOSE:
                return messages, parse_close(payload)[0]
            if opcode in (OP_BINARY, OP_TEXT):
                messages.append(payload)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawWS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Protocol v1 over a RawWS


def reply(ws: RawWS, *, timeout: float = 10.0) -> Any:
    """The next protocol frame from the server (control frames skipped), decoded.

    Raises AssertionError on a close frame (naming its code) and TimeoutError
    when nothing comes within `timeout` units.
    """
    while True:
        opcode, payload = ws.read_frame(timeout * UNIT)
        if opcode == OP_BINARY:
            return decode_server_frame(payload)
        if opcode == OP_CLOSE:
            code = parse_close(payload)[0] if payload else None
            raise AssertionError(f"the server closed the connection ({code})")


def request(ws: RawWS, frame: Any, *, timeout: float = 10.0) -> Any:
    """Send `frame` and return the server's reply frame."""
    ws.send_raw(masked(encode(frame)))
    return reply(ws, timeout=timeout)


def open_session(ws: RawWS, config: dict[str, Any], *, reset: bool = True) -> None:
    """Open (and reset) a session on `ws`, failing the test if the server refuses."""
    opened = request(ws, Open(id=1, config=config))
    assert not isinstance(opened, Error), opened
    if reset:
        result = request(ws, Reset(id=2, seed=0))
        assert not isinstance(result, Error), result


def step(rid: int, action: Any = 0) -> Step:
    return Step(id=rid, action=action)
