"""The web page: watch or play a session in a browser, over the session WebSocket.

The page (``static/``: ``index.html``, ``app.js``, ``style.css``, ``screen.js``
(image observations), ``tree.js`` (any other observation, as a collapsible
tree), ``inputs.js`` (an action input built from the action space),
``session.js`` and ``protocol.js`` over ``msgpack.js``, a dependency-free
protocol v1 codec whose frame tables and limits are ``wire.js``, generated
from :mod:`openenv_ws.wire` by ``protocol/make_js.py``; all ES modules) opens its own session on
``/ws`` like any other client, as a client of structured values (SPEC
section 22). Everything it loads comes from this package:
no CDN, no network beyond the server that serves it.

Routes (added by ``create_app(..., web=True)``):

- ``GET /`` redirects to ``/web/``;
- ``GET /web/`` serves the page, ``/web/<file>`` its static files;
- ``GET /web/info`` tells the page the protocol version, the WebSocket path and,
  when the environment's plugin says, the games and observation types to offer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..environment import EnvFactory
from ..protocol import PROTOCOL_VERSION, WS_PATH
from ..registry import EnvPlugin

__all__ = ["STATIC_DIR", "env_choices", "web_routes"]

#: Folder of the page's files, shipped as package data.
STATIC_DIR = Path(__file__).resolve().parent / "static"


def env_choices(env_factory: EnvFactory) -> dict[str, Any]:
    """What the page offers in its ``open`` config for `env_factory`'s sessions.

    An :class:`~openenv_ws.registry.EnvPlugin` with ``choices`` (Atari's: its
    bundled games and observation types) says; any other factory gets empty
    lists, and the page sends the config the user types.
    """
    found: dict[str, Any] = {"env": None, "games": [], "obs_types": [], "defaults": {}}
    if isinstance(env_factory, EnvPlugin) and env_factory.choices is not None:
        found.update(env_factory.choices())
    return found


def web_routes(env_factory: EnvFactory) -> list[BaseRoute]:
    """The page's routes, to add to the app serving `env_factory`'s sessions."""
    choices = env_choices(env_factory)

    async def info(request: Request) -> JSONResponse:
        root = request.scope.get("root_path", "")
        return JSONResponse(
            {"protocol": PROTOCOL_VERSION, "ws_path": root + WS_PATH, **choices},
            headers={"Cache-Control": "no-store"},
        )

    async def home(request: Request) -> RedirectResponse:
        return RedirectResponse(request.scope.get("root_path", "") + "/web/", status_code=307)

    return [
        Route("/", home, methods=["GET", "HEAD"]),
        Route("/web/info", info, methods=["GET"]),
        Mount("/web", StaticFiles(directory=STATIC_DIR, html=True), name="web"),
    ]
