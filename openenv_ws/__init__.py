"""openenv-ws: a WebSocket-first, persistent-session runtime for RL environments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import errors
from .errors import *  # noqa: F403 - every error of the tree, as errors.__all__ lists them
from .protocol import PROTOCOL_VERSION
from .version import __version__

#: The version, the protocol version, the vector-session client and every error
#: of the one exception tree.
__all__ = ["PROTOCOL_VERSION", "VectorSessionClient", "__version__"]
__all__ += errors.__all__

if TYPE_CHECKING:
    from .client.vector_session import VectorSessionClient


def __getattr__(name: str) -> Any:
    # The client is imported when first named: ``import openenv_ws`` (a server,
    # a worker) does not load the clients.
    if name == "VectorSessionClient":
        from .client.vector_session import VectorSessionClient

        return VectorSessionClient
    raise AttributeError(f"module 'openenv_ws' has no attribute {name!r}")
