"""The leanest WebSocket server around ``ServerSession``: a floor for bench_vector.py.

One asyncio protocol per connection on uvloop: the upgrade handshake, binary
frames parsed in place, ``ServerSession.handle`` (the same protocol v1 code
as the real server), and each reply written with one ``writelines``. No
uvicorn, no Starlette, no pings, no limits: not a server to use, only the
measure of what protocol v1 over TCP costs once every framework layer is
gone. Prints the same "serving protocol v1 on ws://HOST:PORT/ws" line as
``openenv-ws serve``.

    python -m benchmarks.bare_ws_server
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from typing import Any

import uvloop
from websockets.speedups import apply_mask

from atari import atari_factory
from openenv_ws.server import ServerSession

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.upgraded = False
        self.session = ServerSession(atari_factory, max_frame_size=1 << 20)
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # uvloop's transport, duck-typed like asyncio's

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buf[:end]).split(b"\r\n")
            del buf[: end + 4]
            key = next(
                line.split(b":", 1)[1].strip()
                for line in lines
                if line.lower().startswith(b"sec-websocket-key")
            )
            accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
            self.transport.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            self.upgraded = True
        while len(buf) >= 2:
            length, head = buf[1] & 0x7F, 2
            if length == 126:
                if len(buf) < 4:
                    return
                length, head = int.from_bytes(buf[2:4], "big"), 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length, head = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < head + 4 + length:
                return
            opcode = buf[0] & 0x0F
            payload = apply_mask(
                bytes(buf[head + 4 : head + 4 + length]), bytes(buf[head : head + 4])
            )
            del buf[: head + 4 + length]
            if opcode == 8:  # close
                self.transport.close()
                return
            if opcode != 2:
                continue
            reply, _ = self.session.handle(payload)
            n = len(reply)
            if n < 126:
                header = struct.pack("!BB", 0x82, n)
            elif n < 1 << 16:
                header = struct.pack("!BBH", 0x82, 126, n)
            else:
                header = struct.pack("!BBQ", 0x82, 127, n)
            self.transport.writelines([header, reply])

    def connection_lost(self, exc: Exception | None) -> None:
        self.session.close()


async def _serve() -> None:
    server = await asyncio.get_running_loop().create_server(_Connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"serving protocol v1 on ws://127.0.0.1:{port}/ws", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(_serve())
