"""openenv-ws clients: synchronous and asynchronous sessions over WebSocket."""

from __future__ import annotations

from ._core import DEFAULT, StepResult
from .async_ import AsyncEnvClient
from .sync import EnvClient

__all__ = ["DEFAULT", "AsyncEnvClient", "EnvClient", "StepResult"]
