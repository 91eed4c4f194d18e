"""The TLS layer built at accept (``_tlsaccept``), on uvloop and on asyncio's own loop: the
application's protocol hears of a connection when it is accepted, before any TLS byte, and
of its end whether or not the handshake was done; a handshaken connection works as usual."""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
from typing import Any

import pytest

from openenv_ws.server.transport.tlsaccept import tls_loop

from ..conftest import UNIT
from .conftest import Pki

KINDS = ["asyncio", *(["uvloop"] if importlib.util.find_spec("uvloop") else [])]


class Echo(asyncio.Protocol):
    """Upper-cases what it reads; notes every event, in order."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.transport: Any = None

    def raw_made(self, transport: asyncio.BaseTransport) -> None:
        self.events.append(("raw_made", transport.get_extra_info("peername")[0]))

    def raw_lost(self) -> None:
        self.events.append("raw_lost")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.events.append(("made", transport.get_extra_info("sslcontext") is not None))

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")


async def _until(condition: Any, what: str) -> None:
    try:
        async with asyncio.timeout(10 * UNIT):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"{what} not reached within {10 * UNIT:g} s") from None


async def _scenario(pki: Pki) -> None:
    events: list[Any] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.server))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Echo(events), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    async with server:
        # A connection that never starts TLS: seen at accept, and its end seen too.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await _until(lambda: events, "raw_made")
        assert events == [("raw_made", "127.0.0.1")]
        writer.close()
        await _until(lambda: "raw_lost" in events, "raw_lost")
        assert events == [("raw_made", "127.0.0.1"), "raw_lost"]
        # A TLS connection: seen at accept, then made once handshaken, and it works.
        events.clear()
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=pki.context(), server_hostname="127.0.0.1"
        )
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"HELLO"
        assert events == [("raw_made", "127.0.0.1"), ("made", True)]
        writer.close()
        await _until(lambda: "lost" in events and "raw_lost" in events, "both ends")


@pytest.mark.parametrize("kind", KINDS)
def test_connections_are_seen_at_accept(pki: Pki, kind: str) -> None:
    loop = tls_loop(5.0, kind=kind)()
    try:
        loop.run_until_complete(_scenario(pki))
    finally:
        loop.close()
