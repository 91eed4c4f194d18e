"""What every provider offers: a server's URL while it runs, start and stop."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["ServerProvider"]


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
