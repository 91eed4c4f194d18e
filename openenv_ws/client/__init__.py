"""openenv-ws clients: synchronous, asynchronous and vector sessions over WebSocket, and the HTTP fallback."""

from __future__ import annotations

from ._core import DEFAULT, StepResult
from .async_ import AsyncEnvClient
from .http_fallback import HTTPEnvClient
from .sync import EnvClient
from .vector import VectorEnvClient
from .vector_session import VectorSessionClient

__all__ = [
    "DEFAULT",
    "AsyncEnvClient",
    "EnvClient",
    "HTTPEnvClient",
    "StepResult",
    "VectorEnvClient",
    "VectorSessionClient",
]
