"""What every provider offers: a server's URL while it runs, start and stop."""

from __future__ import annotations

import http.client
import json
from typing import Any, Protocol, runtime_checkable

__all__ = ["ServerProvider", "fetch_health", "http_base"]


@runtime_checkable
class ServerProvider(Protocol):
    """A source of one server: :meth:`start` it, connect to :attr:`url`, :meth:`stop` it.

    ``stop()`` is idempotent; clients created by ``from_local`` or
    ``from_docker_image`` call it when they close.
    """

    @property
    def url(self) -> str:
        """The ws:// URL of the server's session endpoint."""
        ...

    def start(self) -> Any:
        """Start the server and wait until it is healthy; returns the provider."""
        ...

    def stop(self) -> None:
        """Stop the server and release what it holds."""
        ...


def http_base(ws_url: str) -> str:
    """``ws://host:port/ws`` -> ``http://host:port`` (where ``/health`` lives)."""
    return ws_url.replace("ws://", "http://", 1).removesuffix("/ws")


def fetch_health(host: str, port: int, *, timeout: float) -> dict[str, Any] | None:
    """A server's ``GET /health`` answer, or None if it does not answer 200 with JSON."""
    conn = http.client.HTTPConnection(host.strip("[]"), port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        if response.status != 200:
            return None
        data: dict[str, Any] = json.loads(response.read())
        return data
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()
