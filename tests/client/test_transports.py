"""Both client WebSocket transports, asyncio and blocking, against a scripted raw server.

A real loopback TCP server answers the handshake and then writes exactly the
frames a test wants (fragments, pings, violations, closes), in one write or
dribbled byte by byte, and records what the client sends back. Each test runs
once per transport: both carry out the decisions of the one sans-I/O
connection (:mod:`openenv_ws.client._connection`, tested alone in
``test_connection.py``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from openenv_ws.client._aws import AsyncWebSocket
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.errors import AuthError, ProtocolError, ServerUnavailable, SessionClosed
from openenv_ws.wire.framing import apply_mask, frame_head, parse_head
from openenv_ws.wire.handshake import GUID

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """A server frame (unmasked unless `mask` is given: a violation the client must refuse)."""
    if mask is None:
        return frame_head(opcode, len(payload), fin=fin) + payload
    return frame_head(opcode, len(payload), fin=fin, key=mask) + apply_mask(payload, mask)


async def read_client_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(opcode, unmasked payload) of the next client frame; clients must mask."""
    buf = bytearray(await reader.readexactly(2))
    while (head := parse_head(buf, 0, len(buf), True, None)) is None:
        buf += await reader.readexactly(1)
    first, start, stop = head
    buf += await reader.readexactly(stop - len(buf))
    return first & 0x0F, apply_mask(buf[start:stop], buf[start - 4 : start])


def accept(head: bytes, status: str = "101 Switching Protocols", key_ok: bool = True) -> bytes:
    key = next(
        line.split(b":", 1)[1].strip()
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    digest = base64.b64encode(hashlib.sha1(key + GUID).digest()) if key_ok else b"bad="
    return (
        f"HTTP/1.1 {status}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {digest.decode()}\r\n\r\n"
    ).encode()


class Blocking:
    """The blocking transport behind the asyncio one's methods (its calls run in a thread)."""

    def __init__(self, ws: BlockingWebSocket) -> None:
        self.ws = ws

    @classmethod
    async def connect(cls, url: str, *, max_size: int = 64 << 20) -> Blocking:
        return cls(await asyncio.to_thread(BlockingWebSocket, url, max_size=max_size))

    @property
    def closed(self) -> bool:
        return self.ws.closed

    async def recv(self) -> bytes:
        return await asyncio.to_thread(self.ws.recv, bytes, timeout=10)

    async def send(self, data: bytes) -> None:
        await asyncio.to_thread(self.ws.send, data)

    async def close(self, *, timeout: float = 2.0) -> None:
        await asyncio.to_thread(self.ws.close, timeout=timeout)


@pytest.fixture(params=["asyncio", "blocking"])
def transport(request: pytest.FixtureRequest) -> Any:
    """The transport class under test (``connect``, ``recv``, ``send``, ``close``)."""
    return AsyncWebSocket if request.param == "asyncio" else Blocking


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await script(reader, writer)
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_fragments_pings_and_frames_with_the_answer(transport, raw_server) -> None:  # type: ignore[no-untyped-def]
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        # The first message comes in the same write as the handshake answer.
        writer.write(accept(head) + frame(2, b"first"))
        await writer.drain()
        stream = (
            frame(2, b"frag-", fin=False)
            + frame(9, b"are you there")  # a ping inside a fragmented message
            + frame(0, b"mented", fin=False)
            + frame(0, b"!")
            + frame(2, b"x" * 70000)  # 64-bit length
        )
        for i in range(len(stream)):  # dribbled one byte per write
            writer.write(stream[i : i + 1])
            if i % 97 == 0:
                await writer.drain()
        got.append(await read_client_frame(reader))  # the pong
        got.append(await read_client_frame(reader))  # the client's message
        done.set()
        await reader.read()

    ws = await transport.connect(await raw_server(script))
    assert await ws.recv() == b"first"
    assert await ws.recv() == b"frag-mented!"
    assert await ws.recv() == b"x" * 70000
    await ws.send(b"\x00\x01 from the client")
    await asyncio.wait_for(done.wait(), 10)
    assert got == [(10, b"are you there"), (2, b"\x00\x01 from the client")]
    await ws.close(timeout=1)
    assert ws.closed


@pytest.mark.parametrize(
    ("bad", "code", "message"),
    [
        (frame(2, b"hidden", mask=b"abcd"), 1002, "masked frame"),
        (bytes([0x82 | 0x40, 1, 0]), 1002, "reserved bits"),
        (frame(2, b"y" * 2000), 1009, "above the client's limit of 1024"),
        (frame(2, b"a", fin=False) + frame(2, b"b"), 1002, "new message inside a fragmented"),
        (frame(0, b"orphan"), 1002, "no message to continue"),
        (frame(5, b""), 1002, "unknown opcode 5"),
    ],
)
async def test_violations_close_with_their_code(
    transport, raw_server, bad: bytes, code: int, message: str
) -> None:  # type: ignore[no-untyped-def]
    answer: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")) + frame(2, b"ok") + bad)
        await writer.drain()
        answer.set_result(await read_client_frame(reader))
        await reader.read()

    ws = await transport.connect(await raw_server(script), max_size=1024)
    assert await ws.recv() == b"ok"  # what came before the violation is delivered
    with pytest.raises(ProtocolError, match=message):
        await ws.recv()
    opcode, payload = await asyncio.wait_for(answer, 10)
    assert opcode == 8 and struct.unpack("!H", payload[:2])[0] == code
    with pytest.raises(SessionClosed):
        await ws.recv()
    with pytest.raises(SessionClosed):
        await ws.send(b"late")


async def test_server_close_and_drop(transport, raw_server) -> None:  # type: ignore[no-untyped-def]
    echoed: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()

    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        writer.write(frame(8, struct.pack("!H", 1011) + b"it broke"))
        await writer.drain()
        echoed.set_result(await read_client_frame(reader))

    ws = await transport.connect(await raw_server(closing))
    with pytest.raises(SessionClosed) as info:
        await ws.recv()
    assert (info.value.close_code, info.value.reason) == (1011, "it broke")
    assert await asyncio.wait_for(echoed, 10) == (8, struct.pack("!H", 1011))

    async def dropping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")) + frame(2, b"last"))
        await writer.drain()

    ws = await transport.connect(await raw_server(dropping))
    assert await ws.recv() == b"last"
    with pytest.raises(SessionClosed) as info:
        await ws.recv()
    assert info.value.close_code is None and "dropped" in info.value.reason


@pytest.mark.parametrize(
    ("status", "key_ok", "error", "message"),
    [
        ("403 Forbidden", True, AuthError, "HTTP 403"),
        ("401 Unauthorized", True, AuthError, "HTTP 401"),
        ("500 Internal Server Error", True, ServerUnavailable, "did not accept a WebSocket"),
        ("101 Switching Protocols", False, ProtocolError, "Sec-WebSocket-Accept"),
    ],
)
async def test_refused_handshakes(
    transport, raw_server, status: str, key_ok: bool, error: type, message: str
) -> None:  # type: ignore[no-untyped-def]
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n"), status, key_ok))
        await writer.drain()
        await reader.read()

    with pytest.raises(error, match=message):
        await transport.connect(await raw_server(script))


async def test_connection_dropped_during_handshake(transport, raw_server) -> None:  # type: ignore[no-untyped-def]
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching")  # and gone

    with pytest.raises(ServerUnavailable, match="during the handshake"):
        await transport.connect(await raw_server(script))


async def test_frames_right_behind_the_answer_are_kept_whole(transport, raw_server) -> None:  # type: ignore[no-untyped-def]
    tricky = b"\r\n\r\n looks like the end of an HTTP head"

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(accept(await reader.readuntil(b"\r\n\r\n")))
        for i in range(20):  # separate writes, before the client has checked the answer
            writer.write(frame(2, tricky + bytes([i])))
        await writer.drain()
        await reader.read()

    ws = await transport.connect(await raw_server(script))
    assert [await ws.recv() for _ in range(20)] == [tricky + bytes([i]) for i in range(20)]
    await ws.close(timeout=1)


async def test_an_endless_handshake_answer_is_refused(transport, raw_server) -> None:  # type: ignore[no-untyped-def]
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\n")
        for i in range(2000):
            writer.write(f"X-Filler-{i}: {'y' * 40}\r\n".encode())
        await writer.drain()
        await reader.read()

    with pytest.raises(ProtocolError, match="exceed 64 KiB"):
        await asyncio.wait_for(transport.connect(await raw_server(script)), 10)
