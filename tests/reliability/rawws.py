"""A WebSocket client at the frame level, to send what well-behaved clients never send.

It never answers pings on its own, never fragments unless told to and masks
only when asked, so tests can play a frozen peer or a broken one.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import struct
import time
from typing import Any

import numpy as np

__all__ = ["OP_BINARY", "OP_CLOSE", "OP_CONT", "OP_PING", "OP_PONG", "OP_TEXT", "RawWS"]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


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
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | opcode & 0x0F])
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([bit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    data = np.frombuffer(payload, np.uint8)  # a megabyte at once, not byte by byte
    mask = np.resize(np.frombuffer(key, np.uint8), len(payload))
    return head + key + (data ^ mask).tobytes()


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
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16)).decode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
            ).encode()
        )
        self._buf = b""
        while b"\r\n\r\n" not in self._buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                self.sock.close()
                raise ConnectionError("closed during the handshake")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ", 2)[1])
        #: The handshake answer's headers (lower-case names).
        self.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        if self.status != 101:
            self.sock.close()
            raise ConnectionError(f"handshake refused: {head.decode(errors='replace')}")

    @classmethod
    def to(cls, url: str, **kwargs: Any) -> RawWS:
        host, _, rest = url.removeprefix("ws://").partition(":")
        port = int(rest.split("/", 1)[0])
        return cls(host, port, **kwargs)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, payload: bytes, opcode: int = OP_BINARY, **kwargs: object) -> None:
        self.sock.sendall(frame_bytes(opcode, payload, **kwargs))  # type: ignore[arg-type]

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_frame(self, timeout: float) -> tuple[int, bytes]:
        """The next frame (opcode, payload); TimeoutError, or EOFError when the socket ends."""
        deadline = time.monotonic() + timeout
        b0, b1 = self._read(2, deadline)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2, deadline))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8, deadline))[0]
        return b0 & 0x0F, self._read(n, deadline)

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
                return messages, struct.unpack("!H", payload[:2])[0] if payload else 1005
            if opcode in (OP_BINARY, OP_TEXT):
                messages.append(payload)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self) -> RawWS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
