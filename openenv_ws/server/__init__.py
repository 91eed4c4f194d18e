"""The openenv-ws server, grouped by job in four sub-packages over one settings object.

- :mod:`.limits`: :class:`ServerLimits`, every limit and setting of a server
  process, validated when made (imports nothing of the server).
- :mod:`.transport`: what arrives on a socket before it reaches a route:
  uvicorn's protocols (the fast WebSocket, the connection guard, the TLS
  accept), the host/origin/token middleware, running and draining uvicorn.
- :mod:`.runtime`: what a process provides its sessions: calls off the event
  loop, the warm pool, worker processes, metrics.
- :mod:`.session`: one session and its life: serving its frames (single or
  vector), admission, resume, replay, expiry, cold-open pacing, the
  supervisor and the WebSocket connection loop.
- :mod:`.routes`: the Starlette app and its HTTP routes (fallback, OpenEnv).

Each layer imports only those listed before it.
"""

from __future__ import annotations

from .limits import ServerLimits
from .routes.app import create_app
from .session.admission import SessionRegistry
from .session.replies import CloseRequest
from .session.server_session import ServerSession
from .transport.serve import ServerThread, bind_socket, uvicorn_config

__all__ = [
    "CloseRequest",
    "ServerLimits",
    "ServerSession",
    "ServerThread",
    "SessionRegistry",
    "bind_socket",
    "create_app",
    "uvicorn_config",
]
