"""BlockingWebSocket.recv_nowait: never waits, resumes a message that arrives in pieces."""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
from collections.abc import Iterator

import pytest

from openenv_ws.client._ws import NOT_READY, BlockingWebSocket
from openenv_ws.wire.handshake import GUID

from ...conftest import UNIT


class PieceServer:
    """A one-connection WebSocket peer that sends frames byte ranges at a time, on cue."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conn: socket.socket | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key")
        )
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        conn.sendall(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        self.conn = conn
        self.ready.set()

    def send_raw(self, data: bytes) -> None:
        assert self.conn is not None
        self.conn.sendall(data)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@pytest.fixture
def peer() -> Iterator[PieceServer]:
    server = PieceServer()
    yield server
    server.close()


def _wait_readable(ws: BlockingWebSocket) -> None:
    import select

    assert select.select([ws.fileno()], [], [], 5 * UNIT)[0]


def test_recv_nowait_returns_not_ready_then_the_whole_message(peer: PieceServer) -> None:
    ws = BlockingWebSocket(f"ws://127.0.0.1:{peer.port}/ws")
    assert peer.ready.wait(5 * UNIT)
    assert ws.recv_nowait(bytes) is NOT_READY  # nothing sent yet: no wait, no error
    payload = bytes(range(200)) * 2  # 400 bytes: a 16-bit length header
    frame = bytes([0x82, 126]) + len(payload).to_bytes(2, "big") + payload
    ping = bytes([0x89, 0])
    peer.send_raw(ping + frame[:3])  # a ping, then a header cut in the middle
    _wait_readable(ws)
    assert ws.recv_nowait(bytes) is NOT_READY
    assert ws.buffered == 3  # the ping was answered and consumed, the cut header kept
    peer.send_raw(frame[3:150])
    _wait_readable(ws)
    assert ws.recv_nowait(bytes) is NOT_READY
    peer.send_raw(frame[150:] + frame)  # the rest, then a second message at once
    _wait_readable(ws)
    assert ws.recv_nowait(bytes) == payload
    assert ws.recv_nowait(bytes) == payload  # already buffered: no read needed
    assert ws.buffered == 0 and ws.recv_nowait(bytes) is NOT_READY
    ws.send(b"after")  # a non-blocking socket still sends whole frames
    assert peer.conn is not None
    peer.conn.settimeout(5 * UNIT)
    got = b""
    while len(got) < 2 + 2 + 4 + 5:  # the pong (2 + 4 mask) and the 'after' frame
        got += peer.conn.recv(64)
    assert got[0] == 0x8A and got[6] == 0x82
    ws.close(timeout=0.1)
