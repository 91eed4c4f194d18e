"""The openenv-ws server: Starlette app factory, session loop and uvicorn runner."""

from __future__ import annotations

from ._serve import ServerThread, bind_socket, uvicorn_config
from ._session import CloseRequest, ServerSession
from .app import create_app
from .registry import ServerLimits, SessionRegistry

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
