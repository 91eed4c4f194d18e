"""The ASGI types the server's endpoints and middleware are written against."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send"]

#: The connection's scope (type, path, headers, extensions, ...).
Scope = MutableMapping[str, Any]
#: One ASGI event (``websocket.receive``, ``http.response.start``, ...).
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
