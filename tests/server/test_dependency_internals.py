"""The uvicorn and websockets internals the server's protocol classes build on are still there.

:mod:`openenv_ws.server.transport.fastws` subclasses uvicorn's ``websockets-sansio``
protocol and reads its state (and that of the websockets ``ServerProtocol``
it drives); :mod:`openenv_ws.server.transport.guard` subclasses uvicorn's httptools
protocol. ``pyproject.toml`` pins both dependencies to the range tested
here; a release that renames one of these names fails this test with a
message naming it, instead of a server that breaks on its first connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from openenv_ws.server.transport.fastws import FastWebSocketProtocol
from openenv_ws.server.transport.guard import GuardedProtocol

# Hooks the two classes override: the base class must still call them.
WS_HOOKS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "handle_connect",
    "handle_parser_exception",
    "pause_writing",
    "resume_writing",
    "send",
)
HTTP_HOOKS = (
    "connection_made",
    "connection_lost",
    "data_received",
    "on_message_begin",
    "on_headers_complete",
    "on_message_complete",
    "handle_websocket_upgrade",
)
# State of uvicorn's WebSocket protocol read or written by the fast path.
WS_STATE = (
    "client",
    "close_sent",
    "close_timeout",
    "close_timer",
    "config",
    "conn",
    "disconnected",
    "handshake_complete",
    "loop",
    "queue",
    "read_paused",
    "transport",
    "writable",
)
# State of the websockets ServerProtocol (uvicorn's ``conn``) read by the fast path.
CONN_STATE = ("close_sent", "current_size", "eof_sent", "reader", "state")
CONN_METHODS = ("data_to_send", "fail", "send_close")
HTTP_STATE = ("loop", "parser", "transport", "ws_protocol_class")


async def _app(scope: Any, receive: Any, send: Any) -> None:
    return None


def _missing(obj: object, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if not hasattr(obj, name)]


def _fail(what: str, missing: list[str]) -> None:
    if missing:
        pytest.fail(
            f"{what} no longer has {', '.join(missing)} (uvicorn {uvicorn.__version__}); "
            "openenv_ws/server/transport/fastws.py and _guard.py rely on them: adapt them or keep "
            "the dependency within the range pyproject.toml pins"
        )


def test_the_base_classes_still_have_the_hooks_we_override() -> None:
    _fail("uvicorn's WebSocketsSansIOProtocol", _missing(WebSocketsSansIOProtocol, WS_HOOKS))
    _fail("uvicorn's HttpToolsProtocol", _missing(HttpToolsProtocol, HTTP_HOOKS))
    assert issubclass(FastWebSocketProtocol, WebSocketsSansIOProtocol)
    assert issubclass(GuardedProtocol, HttpToolsProtocol)


def test_a_connection_has_the_state_the_fast_path_reads() -> None:
    async def build() -> tuple[Any, Any]:
        config = uvicorn.Config(_app, ws=FastWebSocketProtocol, lifespan="off")
        config.load()
        ws = FastWebSocketProtocol(config=config, server_state=ServerState(), app_state={})
        http = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        return ws, http

    ws, http = asyncio.run(build())
    _fail("uvicorn's WebSocket protocol", _missing(ws, WS_STATE))
    _fail("the websockets ServerProtocol", _missing(ws.conn, CONN_STATE + CONN_METHODS))
    _fail("the websockets ServerProtocol's reader", _missing(ws.conn.reader, ("buffer",)))
    _fail("uvicorn's HTTP protocol", _missing(http, HTTP_STATE))
