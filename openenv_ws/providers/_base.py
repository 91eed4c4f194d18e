"""What every provider offers: a server's URL while it runs, start and stop."""

from __future__ import annotations

import http.client
import json
import os
from typing import IO, Any, Protocol, runtime_checkable

from ..errors import ServerUnavailable

__all__ = ["OneServer", "ServerProvider", "fetch_health", "http_base", "read_output"]


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


class OneServer:
    """The addresses of a provider's one server, once it listens at a host and port.

    Subclasses say where the server is (:meth:`_address`, None while it is not
    running) and what to do when it is not (:attr:`not_running`).
    """

    #: The message of the :class:`~openenv_ws.errors.ServerUnavailable` that
    #: :attr:`url` raises while the server is not running.
    not_running = "the server is not running; call start() first"

    def _address(self) -> tuple[str, int] | None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        """The ws:// URL of the session endpoint."""
        address = self._address()
        if address is None:
            raise ServerUnavailable(self.not_running)
        host, port = address
        return f"ws://[{host}]:{port}/ws" if ":" in host else f"ws://{host}:{port}/ws"

    @property
    def http_url(self) -> str:
        """The server's http:// base URL (``/health`` lives there)."""
        return http_base(self.url)

    def health(self, *, timeout: float = 2.0) -> dict[str, Any] | None:
        """The server's ``/health`` answer, or None if it does not answer."""
        address = self._address()
        return None if address is None else fetch_health(*address, timeout=timeout)


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


def read_output(log: IO[bytes]) -> str:
    """All a child process has written so far to ``log``, the file that is its stdout.

    The child shares the file's offset: seeking it to read would make the child's
    next write land at the start and overwrite what was there (a ready line lost
    this way looks like a server that never started). ``pread`` leaves it alone.
    """
    fd = log.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")
