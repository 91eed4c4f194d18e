"""A WebSocket client at the frame level, to send what well-behaved clients never send.

It never answers pings on its own, never fragments unless told to and masks
only when asked, so tests can play a frozen peer or a broken one.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import time
from typing import Any

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

__all__ = ["OP_BINARY", "OP_CLOSE", "OP_CONT", "OP_PING", "OP_PONG", "OP_TEXT", "RawWS"]


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
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = self.sock.recv(4096)
            if not chunk:
                self.sock.close()
                raise ConnectionError("closed during the handshake")
            answer += chunk
        head, _, rest = answer.partition(b"\r\n\r\n")
        # The server's frames, read as they come: no checks but the framing itself.
        self._reader = FrameReader(masked=False)
        self._reader.feed(rest)
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
