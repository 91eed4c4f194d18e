"""Peers measured side by side with openenv-ws (each optional: a missing one is reported, not fatal)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["serve"]


def serve(app: Any) -> None:
    """Serve an ASGI `app` with uvicorn's defaults on ``PEER_HOST`` (default 127.0.0.1),
    any free port, printing ``serving on http://HOST:PORT`` once bound."""
    import uvicorn

    from openenv_ws.server import bind_socket

    host = os.environ.get("PEER_HOST", "127.0.0.1")
    sock = bind_socket(host, 0)
    port = sock.getsockname()[1]
    print(f"serving on http://{host}:{port}", flush=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run(
        sockets=[sock]
    )
