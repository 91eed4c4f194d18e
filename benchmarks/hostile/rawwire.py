"""Raw WebSocket bits for the attacks: an upgrade request, masked client frames, server frames.

The attacks need bytes no well-behaved client sends (floods of control
frames, upgrade requests that never end), so they speak the wire themselves:
frames are serialized by websockets; server frames are read plainly (they are
never masked).
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time

from openenv_ws.wire.framing import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    Frame,
    FrameReader,
    serialize,
)

__all__ = [
    "MB",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_PING",
    "OP_PONG",
    "Target",
    "client_frame",
    "close_code",
    "connect",
    "error_name",
    "handshake",
    "http_status",
    "read_server_frame",
    "upgrade_request",
]

MB = 1 << 20

Target = tuple[str, int]


def client_frame(opcode: int, payload: bytes = b"") -> bytes:
    """One masked client frame (FIN set)."""
    return serialize(opcode, payload, mask=True)


def upgrade_request(target: Target) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /ws HTTP/1.1\r\nHost: {target[0]}:{target[1]}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def connect(target: Target, source: str, timeout: float) -> socket.socket:
    """A TCP connection to `target` from address `source` (port chosen by the kernel)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect(target)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def error_name(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    return type(exc).__name__


def handshake(target: Target, source: str, timeout: float) -> tuple[str, socket.socket | None]:
    """Try a WebSocket upgrade: ("101", socket) or (what happened instead, None).

    What happened: ``HTTP <status>``, ``closed`` (no answer, the server ended
    the connection), ``reset``, ``refused`` or ``timeout``.
    """
    deadline = time.monotonic() + timeout
    try:
        sock = connect(target, source, timeout)
    except OSError as exc:
        return error_name(exc), None
    try:
        sock.sendall(upgrade_request(target))
        head = b""
        while b"\r\n\r\n" not in head:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                return ("closed" if not head else http_status(head)), None
            head += chunk
    except OSError as exc:
        sock.close()
        return error_name(exc), None
    status = http_status(head)
    if status != "101":
        sock.close()
        return status, None
    return "101", sock


def http_status(head: bytes) -> str:
    """``101``, or ``HTTP 503`` and the like, from the start of an HTTP answer."""
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        return "garbage"
    code = parts[1].decode("latin-1")
    return code if code == "101" else f"HTTP {code}"


def read_server_frame(sock: socket.socket, reader: FrameReader, deadline: float) -> Frame:
    """The next frame from the server; `reader` keeps what follows it."""
    while (frame := reader.next_frame()) is None:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError
        reader.feed(chunk)
    return frame


def close_code(data: bytes) -> int | None:
    """The code of a close frame at the end of `data`, the latest bytes a flood read.

    A scan, not a parse: a flooding connection reads the server's pongs only
    to drop them, and parsing each of millions of frames would slow the
    attack; before a close only pongs of empty pings come, so a close frame
    is the last ``0x88`` byte.
    """
    at = data.rfind(b"\x88")
    if at < 0 or at + 1 >= len(data):
        return None
    n = data[at + 1] & 0x7F
    return struct.unpack_from("!H", data, at + 2)[0] if n >= 2 and at + 4 <= len(data) else 1005
