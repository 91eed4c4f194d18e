"""Framing on the inline path (issue 18, findings 8, 9 and the turns of finding 3).

The server's WebSocket protocol splits frames itself and hands everything but
plain binary messages to the websockets parser. It took a complete message
inside a fragmented one (RFC 6455 5.4 forbids it: 1002), copied its whole
buffer for every piece of a frame arriving in small segments (quadratic), and
served all the control frames of one read in one callback.

The first tests attack a real ``openenv-ws serve`` from a raw socket. The
last ones drive the protocol in-process with a stand-in transport, because
only there can a test decide how the bytes are cut: a socket coalesces what
a slow reader has not taken yet, which hides the per-read costs.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from openenv_ws.protocol import Reset, Result, Step, encode
from openenv_ws.server.transport.fastws import FastWebSocketProtocol
from openenv_ws.testing import FakeEnvironment

from ..._rawwire import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    frame_bytes,
    masked,
    open_session,
    reply,
)
from .conftest import UNIT, HostileServer, Neighbour, RawWS, assert_contained, hostile_server


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server() as server:
        yield server


def _pieces(request: bytes, cut: int) -> tuple[bytes, bytes]:
    return request[:cut], request[cut:]


def _until_close(ws: RawWS, within: float) -> tuple[list[bytes], int | None]:
    """The data messages, then the close code (None: no close within `within` seconds)."""
    try:
        return ws.until_close(within)
    except TimeoutError:
        return [], None


@pytest.mark.parametrize("writes", ["one write", "a write per frame"])
def test_a_complete_message_inside_a_fragmented_one_is_refused_with_1002(
    server: HostileServer, writes: str
) -> None:
    """[binary FIN=0 A1][binary FIN=1 B][continuation A2]: close 1002, B is not served."""
    with Neighbour(server) as neighbour, server.raw() as ws:
        open_session(ws, {})
        a1, a2 = _pieces(encode(Step(id=10, action=1)), 4)
        frames = [
            frame_bytes(OP_BINARY, a1, fin=False),
            frame_bytes(OP_BINARY, encode(Step(id=11, action=2))),
            frame_bytes(OP_CONT, a2),
        ]
        if writes == "one write":
            ws.send_raw(b"".join(frames))
        else:
            for frame in frames:
                ws.send_raw(frame)
        messages, code = _until_close(ws, 10 * UNIT)
        assert code == 1002, f"closed with {code}, not 1002"
        assert messages == [], "a message inside a fragmented one was served"
        neighbour.check()


def test_control_frames_inside_a_fragmented_message_are_allowed(server: HostileServer) -> None:
    """RFC 6455 5.4 lets control frames interleave with fragments: served, in order."""
    local = FakeEnvironment({})
    local.reset(seed=0)
    expected = local.step(3).obs
    with server.raw() as ws:
        open_session(ws, {})
        a1, a2 = _pieces(encode(Step(id=10, action=3)), 5)
        ws.send_raw(
            frame_bytes(OP_BINARY, a1, fin=False)
            + frame_bytes(OP_PING, b"mid")
            + frame_bytes(OP_CONT, a2)
        )
        assert ws.read_frame(10 * UNIT) == (OP_PONG, b"mid")
        result = reply(ws)
        assert isinstance(result, Result) and result.id == 10, result
        assert np.array_equal(result.obs, expected)


def test_a_text_message_that_is_not_utf8_is_refused_with_1007_and_the_rest_discarded(
    server: HostileServer,
) -> None:
    """Frames after the refused one, in the same write, get no answer: the close is final."""
    with server.raw() as ws:
        ws.send_raw(frame_bytes(OP_TEXT, b"\xff\xfe") + frame_bytes(OP_PING, b"after") * 3)
        frames = []
        with contextlib.suppress(EOFError, OSError):
            while True:
                frames.append(ws.read_frame(10 * UNIT))
        assert [opcode for opcode, _ in frames] == [OP_CLOSE], frames
        assert frames[0][1][:2] == (1007).to_bytes(2, "big"), frames
    server.health()


def test_a_frame_begun_before_the_handshake_response_is_refused_with_1002(
    server: HostileServer,
) -> None:
    """Part of a frame sent with the upgrade request (RFC 6455 4.1 says wait): 1002."""
    frame = masked(encode(Step(id=3, action=0)))
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /ws HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    with socket.create_connection((server.host, server.port), timeout=10 * UNIT) as sock:
        sock.sendall(request + frame[:3])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            assert chunk, f"closed during the handshake: {answer!r}"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 101"), answer
        sock.sendall(frame[3:])
        rest = answer.partition(b"\r\n\r\n")[2]
        while len(rest) < 4:
            chunk = sock.recv(4096)
            assert chunk, f"no close frame: {rest!r}"
            rest += chunk
    assert rest[0] & 0x0F == OP_CLOSE and rest[2:4] == (1002).to_bytes(2, "big"), rest
    server.health()


def test_a_large_frame_trickled_in_small_segments_is_served(server: HostileServer) -> None:
    """A 600 KB request in 256-byte writes, a neighbour stepping: the right reply."""
    local = FakeEnvironment({})
    expected = local.reset(seed=5).obs
    request = masked(encode(Reset(id=7, seed=5, options={"pad": b"x" * 600_000})))
    with Neighbour(server) as neighbour, server.raw() as ws:
        rss = server.rss()
        open_session(ws, {})
        for i in range(0, len(request), 256):
            ws.send_raw(request[i : i + 256])
        result = reply(ws, timeout=30)
        assert isinstance(result, Result) and result.id == 7, result
        assert np.array_equal(result.obs, expected)
        assert_contained(server, neighbour, rss_before=rss)


# ---------------------------------------------------------------------- in-process


class _Transport(asyncio.Transport):
    """What the protocol writes, kept; reading paused or not, noted."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closing = False
        self.reading = True

    def write(self, data: Any) -> None:
        self.out += data

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.out += chunk

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def _sizes(scope: Any, receive: Any, send: Any) -> None:
    """An app answering every binary message with its length (8 bytes, big-endian)."""
    assert scope["type"] == "websocket"
    await receive()
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        size = len(message.get("bytes") or b"")
        await send({"type": "websocket.send", "bytes": size.to_bytes(8, "big")})


def _frames(out: bytes | bytearray) -> list[tuple[int, bytes]]:
    """The (opcode, payload) of the unmasked server frames in `out`."""
    frames, pos = [], 0
    while pos < len(out):
        opcode, length, pos = out[pos] & 0x0F, out[pos + 1] & 0x7F, pos + 2
        if length == 126:
            length, pos = int.from_bytes(out[pos : pos + 2], "big"), pos + 2
        elif length == 127:
            length, pos = int.from_bytes(out[pos : pos + 8], "big"), pos + 8
        frames.append((opcode, bytes(out[pos : pos + length])))
        pos += length
    return frames


async def _connected(max_size: int) -> tuple[FastWebSocketProtocol, _Transport]:
    """A protocol with the handshake done, on a stand-in transport, serving :func:`_sizes`."""
    config = Config(app=_sizes, ws_max_size=max_size, lifespan="off", log_level="warning")
    config.load()
    protocol = FastWebSocketProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = _Transport()
    protocol.connection_made(transport)
    key = base64.b64encode(os.urandom(16)).decode()
    protocol.data_received(
        (
            "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    deadline = time.monotonic() + 10 * UNIT
    while not transport.out.startswith(b"HTTP/1.1 101") or b"\r\n\r\n" not in transport.out:
        assert time.monotonic() < deadline, f"no handshake answer: {bytes(transport.out)!r}"
        await asyncio.sleep(0)
    del transport.out[: transport.out.index(b"\r\n\r\n") + 4]
    return protocol, transport


async def _until(condition: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {within:g} s"
        await asyncio.sleep(0)


def test_a_frame_fed_one_byte_at_a_time_is_taken_in_linear_time() -> None:
    """4 MiB in four million one-byte reads: each byte copied a bounded number of times.

    Copying the whole buffer on every read (``bytes +=``) makes this quadratic:
    minutes; the bound is a liveness one, many times what linear work takes.
    """
    payload = os.urandom(4 << 20)
    frame = masked(payload)

    async def run() -> None:
        protocol, transport = await _connected(max_size=8 << 20)
        deadline = time.monotonic() + 30 * UNIT
        for i in range(len(frame)):
            protocol.data_received(frame[i : i + 1])
            if not i & 0xFFFF:
                assert time.monotonic() < deadline, f"only {i} bytes taken in {30 * UNIT:g} s"
        await _until(lambda: transport.out, 10 * UNIT, "the reply")
        assert _frames(transport.out) == [(OP_BINARY, len(payload).to_bytes(8, "big"))]
        protocol.connection_lost(None)

    asyncio.run(run())


def test_the_control_frames_of_one_read_are_served_in_turns() -> None:
    """90 pings in one read: answered over several loop iterations, in order, not all at once."""

    async def run() -> None:
        protocol, transport = await _connected(max_size=1 << 20)
        pings = [str(i).encode() for i in range(90)]
        protocol.data_received(b"".join(frame_bytes(OP_PING, p) for p in pings))
        at_once = len(_frames(transport.out))
        assert at_once < len(pings), "every ping of the read answered in one callback"
        await _until(lambda: len(_frames(transport.out)) == len(pings), 10 * UNIT, "the pongs")
        assert _frames(transport.out) == [(OP_PONG, p) for p in pings]
        assert transport.reading and not transport.closing
        protocol.connection_lost(None)

    asyncio.run(run())
