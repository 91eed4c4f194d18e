"""The Starlette application: the session WebSocket endpoint and ``GET /health``."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute

from .. import __version__
from ..environment import EnvFactory
from ..protocol import DEFAULT_MAX_FRAME_SIZE, PROTOCOL_VERSION, WS_PATH
from ..web import web_routes
from ._session import CloseRequest, ServerSession
from .http import HTTPSessionStore, http_routes
from .openenv_compat import OpenEnvCompat

__all__ = ["ServerLimits", "SessionRegistry", "create_app"]

logger = logging.getLogger("openenv_ws.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Limits of one server process.

    Attributes:
        max_sessions: sessions hosted at once; the next ``open`` gets ``capacity``.
        max_frame_size: largest request frame in bytes (larger: close 1009).
        http_session_ttl: seconds an HTTP session (fallback routes or OpenEnv's
            HTTP routes) may go without a request before it is closed; None: never.
    """

    max_sessions: int = 1024
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    http_session_ttl: float | None = 300.0


@dataclass(slots=True)
class SessionRegistry:
    """The sessions a server process hosts right now, and its counters."""

    limits: ServerLimits
    active: set[ServerSession] = field(default_factory=set)
    opened_total: int = 0

    def admit(self, session: ServerSession) -> tuple[str, str] | None:
        """Take `session` in, or say why not (``capacity``)."""
        if len(self.active) >= self.limits.max_sessions:
            return (
                "capacity",
                f"the server hosts its maximum of {self.limits.max_sessions} sessions; "
                "retry later or use another server",
            )
        self.active.add(session)
        self.opened_total += 1
        return None

    def release(self, session: ServerSession) -> None:
        self.active.discard(session)

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "protocol": PROTOCOL_VERSION,
            "sessions": len(self.active),
            "max_sessions": self.limits.max_sessions,
            "opened_total": self.opened_total,
            "pid": os.getpid(),
        }


class SessionEndpoint:
    """Raw ASGI WebSocket endpoint: one :class:`ServerSession` per connection.

    It talks ASGI directly rather than through Starlette's ``WebSocket``
    wrapper: the per-message work is one receive, one session call, one send.
    """

    def __init__(
        self,
        env_factory: EnvFactory,
        registry: SessionRegistry,
        *,
        openenv: OpenEnvCompat | None = None,
    ) -> None:
        self._factory = env_factory
        self._registry = registry
        self._openenv = openenv

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        if self._openenv is not None:
            # A first text message holding an OpenEnv message selects OpenEnv's JSON dialect.
            dialect = self._openenv.websocket(receive, send)
            receive, send = dialect.receive, dialect.send
        registry = self._registry
        session = ServerSession(
            self._factory,
            max_frame_size=registry.limits.max_frame_size,
            admit=registry.admit,
            release=registry.release,
        )
        try:
            await self._serve(session, receive, send)
        finally:
            session.close()

    async def _serve(self, session: ServerSession, receive: Receive, send: Send) -> None:
        handle = session.handle
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return  # websocket.disconnect: the peer is gone
            data = message.get("bytes")
            close: CloseRequest | None
            if data is None:
                reply, close = session.refuse(
                    "text_frame",
                    "text messages are not protocol v1 frames; send binary MessagePack frames",
                )
            else:
                reply, close = handle(data)
            await send({"type": "websocket.send", "bytes": reply})
            if close is not None:
                await send({"type": "websocket.close", "code": close.code, "reason": close.reason})
                return


def create_app(
    env_factory: EnvFactory,
    *,
    limits: ServerLimits | None = None,
    web: bool = True,
    openenv_config: Mapping[str, Any] | None = None,
) -> Starlette:
    """Build the Starlette app serving `env_factory`'s environments.

    Args:
        env_factory: makes one environment per session from its ``open`` config.
        limits: per-process limits (sessions, frame size, HTTP session TTL).
        web: serve the web page to watch or play a session (``/`` and ``/web/``).
        openenv_config: the environment config of sessions opened by OpenEnv's
            clients (its JSON dialect on ``/ws``, its HTTP routes), whose
            requests carry none (see :mod:`openenv_ws.server.openenv_compat`).

    Returns:
        A Starlette app with ``WS /ws`` (protocol v1, and OpenEnv's dialect),
        ``GET /health``, the HTTP fallback under ``/v1/sessions`` (see
        :mod:`openenv_ws.server.http`), OpenEnv's HTTP routes and, with `web`,
        the page's routes (see :mod:`openenv_ws.web`).
    """
    registry = SessionRegistry(limits or ServerLimits())
    http_sessions = HTTPSessionStore(
        env_factory,
        admit=registry.admit,
        release=registry.release,
        ttl=registry.limits.http_session_ttl,
        max_frame_size=registry.limits.max_frame_size,
    )
    openenv = OpenEnvCompat(http_sessions, openenv_config, __version__)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({**registry.health(), "http_sessions": len(http_sessions)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        http_sessions.start()
        try:
            yield
        finally:
            await http_sessions.aclose()

    routes: list[BaseRoute] = [
        WebSocketRoute(WS_PATH, SessionEndpoint(env_factory, registry, openenv=openenv)),
        Route("/health", health, methods=["GET"]),
        *http_routes(http_sessions),
        *openenv.routes(),
    ]
    if web:
        routes += web_routes(env_factory)
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.registry = registry
    app.state.http_sessions = http_sessions
    return app
