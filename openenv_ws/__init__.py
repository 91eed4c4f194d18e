"""openenv-ws: a WebSocket-first, persistent-session runtime for RL environments."""

from __future__ import annotations

from . import errors
from .errors import *  # noqa: F403 - every error of the tree, as errors.__all__ lists them
from .protocol import PROTOCOL_VERSION

__version__ = "0.1.0"

#: The version, the protocol version and every error of the one exception tree.
__all__ = ["PROTOCOL_VERSION", "__version__"]
__all__ += errors.__all__
