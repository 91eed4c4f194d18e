"""openenv-ws: a WebSocket-first, persistent-session runtime for RL environments."""

from __future__ import annotations

from .errors import (
    AuthError,
    BadSnapshot,
    EnvConfigError,
    InvalidAction,
    InvalidState,
    OpenEnvError,
    PayloadTooBig,
    ProtocolError,
    RemoteEnvError,
    RequestTimeout,
    ServerUnavailable,
    SessionClosed,
)
from .protocol import PROTOCOL_VERSION

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "AuthError",
    "BadSnapshot",
    "EnvConfigError",
    "InvalidAction",
    "InvalidState",
    "OpenEnvError",
    "PayloadTooBig",
    "ProtocolError",
    "RemoteEnvError",
    "RequestTimeout",
    "ServerUnavailable",
    "SessionClosed",
    "__version__",
]
