"""The Starlette application: the session WebSocket endpoint and ``GET /health``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..._shm import HEADER as SHM_HEADER
from ..._shm import ServerRegion, SharedMemoryRefused
from ...environment import EnvFactory
from ...protocol import WS_PATH
from ...version import __version__
from ...web import web_routes
from ..limits import ServerLimits
from ..runtime.pool import POOL_SHARE, WarmPool
from ..runtime.workers import WorkerBoard
from ..session import connection
from ..session.admission import SessionRegistry
from ..session.supervisor import Supervisor
from ..transport.asgi import Receive, Scope, Send
from ..transport.auth import HostCheck, OriginCheck, TokenAuth, scope_header
from .fallback import HTTPSessionStore, http_routes
from .openenv_compat import OpenEnvCompat
from .openenv_mcp import OpenEnvMCP

__all__ = ["ServerLimits", "SessionRegistry", "create_app"]

SHM_HEADER_BYTES = SHM_HEADER.encode()

logger = logging.getLogger("openenv_ws.server")
#: Seconds between two metrics snapshots a worker publishes for the others' /metrics.
METRICS_PUBLISH_INTERVAL = 1.0


class SessionEndpoint:
    """Raw ASGI WebSocket endpoint: one session per connection.

    It talks ASGI directly rather than through Starlette's ``WebSocket``
    wrapper: the per-message work is one receive, one session call, one send.
    The message loop lives in :mod:`openenv_ws.server.session.connection`; the
    :class:`~openenv_ws.server.session.supervisor.Supervisor` handles idle timeouts,
    resumption and draining.
    """

    def __init__(
        self,
        supervisor: Supervisor,
        *,
        openenv: OpenEnvCompat | None = None,
    ) -> None:
        self._supervisor = supervisor
        self._openenv = openenv

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        shared, answer = _shared_region(scope)
        try:
            await send({"type": "websocket.accept", "headers": [] if answer is None else [answer]})
            if self._openenv is None:
                await connection.run(self._supervisor, scope, receive, send, shared=shared)
                return
            # A first text message holding an OpenEnv message selects OpenEnv's JSON dialect.
            dialect = self._openenv.websocket(receive, send)
            await connection.run(
                self._supervisor,
                scope,
                dialect.receive,
                dialect.send,
                native=lambda: dialect.passthrough,
                shared=shared,
            )
        finally:
            if shared is not None and shared.owner is None:
                shared.close()  # no session took it


async def _no_endpoint(websocket: WebSocket) -> None:
    """A WebSocket handshake on any path but the session endpoint: HTTP 404, so that a
    client can tell a wrong URL from a refused token (401/403)."""
    await websocket.send_denial_response(
        PlainTextResponse(
            f"no WebSocket endpoint at this path; openenv-ws sessions are at {WS_PATH}",
            status_code=404,
        )
    )


def _header(scope: Scope, name: bytes) -> str | None:
    value = scope_header(scope, name)
    return None if value is None else value.decode("latin-1")


def _shared_region(scope: Scope) -> tuple[ServerRegion | None, tuple[bytes, bytes] | None]:
    """Map the shared region the handshake offers, if any; the answer header to send."""
    offer = _header(scope, SHM_HEADER_BYTES)
    if offer is None:
        return None, None
    try:
        region = ServerRegion.attach(offer)
    except SharedMemoryRefused as exc:
        logger.debug("shared region refused: %s", exc)
        return None, (SHM_HEADER_BYTES, f"refused: {exc}".encode("latin-1", "replace"))
    return region, (SHM_HEADER_BYTES, b"ok")


def create_app(
    env_factory: EnvFactory,
    *,
    limits: ServerLimits | None = None,
    web: bool = True,
    token: str | None = None,
    openenv_config: Mapping[str, Any] | None = None,
    pool: WarmPool | None = None,
    workers: WorkerBoard | None = None,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Build the Starlette app serving `env_factory`'s environments.

    Args:
        env_factory: makes one environment per session from its ``open`` config.
        limits: per-process limits (sessions, frame size).
        web: serve the web page to watch or play a session (``/`` and ``/web/``).
        token: a bearer token every route but ``/health`` and every session
            needs (see :mod:`openenv_ws.server.transport.auth`); None: no authentication.
        openenv_config: the environment config of sessions opened by OpenEnv's
            clients (its JSON dialect on ``/ws``, its HTTP routes), whose
            requests carry none (see :mod:`openenv_ws.server.routes.openenv_compat`).
        pool: warm environments for new sessions (see :mod:`openenv_ws.server.runtime.pool`);
            it is started and closed with the app, and ``/health`` shows its counters.
        workers: this worker's slot in a multi-process server (see
            :mod:`openenv_ws.server.runtime.workers`); ``/health`` then reports every worker.
        allowed_origins: browser origins (``scheme://host[:port]``, or ``*``)
            whose pages may use the server besides its own; a WebSocket
            handshake or a POST/DELETE with another ``Origin`` header is
            refused with HTTP 403 (see :class:`~openenv_ws.server.transport.auth.OriginCheck`).
            Clients that are not browsers send none and are not affected.
        allowed_hosts: host names (``Host`` header, port ignored; ``*``: any)
            the server answers to besides ``localhost`` and IP addresses;
            requests naming another host get HTTP 403, against DNS rebinding
            (see :class:`~openenv_ws.server.transport.auth.HostCheck`).

    Returns:
        A Starlette app with ``WS /ws`` (protocol v1, and OpenEnv's dialect),
        ``GET /health``, ``GET /metrics`` (Prometheus), the HTTP fallback under
        ``/v1/sessions`` (see :mod:`openenv_ws.server.routes.fallback`), OpenEnv's HTTP
        routes and, with `web`, the page's routes (see :mod:`openenv_ws.web`).
    """
    registry = SessionRegistry(limits or ServerLimits())
    if pool is not None and pool.max_bytes is None:
        # Idle environments held for later sessions: at most an eighth of the budget.
        pool.max_bytes = registry.limits.memory_budget // POOL_SHARE
    # A pool as the factory: sessions also give their environments back to it.
    session_factory: EnvFactory = pool if pool is not None else env_factory
    supervisor = Supervisor(session_factory, registry, token=token)
    metrics = supervisor.metrics
    metrics.observation_bytes = registry.observation_bytes
    if workers is not None:
        board = workers
        registry.on_change = lambda r: board.publish(len(r.active), r.opened_total)
        metrics.peers = board.other_metrics
        metrics.worker = lambda: board.index
    http_sessions = HTTPSessionStore(
        session_factory, registry, cold_opens=supervisor.cold_opens, expiry=supervisor.expiry
    )
    openenv = OpenEnvCompat(http_sessions, openenv_config, __version__)

    async def health(request: Request) -> JSONResponse:
        body = {**registry.health(), **supervisor.health(), "http_sessions": len(http_sessions)}
        if pool is not None:
            body["pool"] = pool.stats()
        if workers is not None:
            body.update(workers.health())
        return JSONResponse(body)

    async def publish_metrics(board: WorkerBoard) -> None:
        while True:
            board.publish_metrics(metrics.snapshot())
            await asyncio.sleep(METRICS_PUBLISH_INTERVAL)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if pool is not None:
            pool.start()
        publisher = None
        if workers is not None:
            publisher = asyncio.get_running_loop().create_task(publish_metrics(workers))
        try:
            async with supervisor.lifespan(app):
                yield
        finally:
            if publisher is not None:
                publisher.cancel()
            await http_sessions.aclose()
            if pool is not None:
                pool.close()

    routes: list[BaseRoute] = [
        WebSocketRoute(
            WS_PATH,
            SessionEndpoint(supervisor, openenv=openenv),
        ),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics.endpoint, methods=["GET"]),
        *http_routes(http_sessions),
        *openenv.routes(),
        OpenEnvMCP(openenv).route(),
    ]
    if web:
        routes += web_routes(env_factory)
    routes.append(WebSocketRoute("/{path:path}", _no_endpoint))
    app = Starlette(routes=routes, lifespan=lifespan)
    if token is not None:
        app.add_middleware(TokenAuth, token=token)
    app.add_middleware(OriginCheck, allowed=allowed_origins)
    app.add_middleware(HostCheck, allowed=allowed_hosts)
    app.state.registry = registry
    app.state.supervisor = supervisor
    app.state.limits = registry.limits  # the transport settings uvicorn_config reads
    app.state.http_sessions = http_sessions
    return app
