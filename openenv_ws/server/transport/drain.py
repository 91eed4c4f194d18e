"""Graceful shutdown: a uvicorn server that drains sessions on SIGTERM.

uvicorn's own shutdown closes every WebSocket at once with 1012 and drops the
requests that have arrived but not been served. :class:`DrainingServer`
first stops accepting connections, then lets the app's
:class:`~openenv_ws.server.session.supervisor.Supervisor` serve what already arrived
and close each session with ``shutting_down`` and 1001, and only then runs
uvicorn's shutdown. After a graceful shutdown the process exits with status 0
(uvicorn re-raises the signal, which would end the process with -15).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

import uvicorn

__all__ = ["Drainable", "DrainingServer", "app_state", "find_supervisor"]

T = TypeVar("T")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@runtime_checkable
class Drainable(Protocol):
    """What drains an app's sessions (its :class:`~openenv_ws.server.session.supervisor.Supervisor`)."""

    async def drain(self, timeout: float | None = None) -> None: ...


def app_state(app: Any, name: str, kind: type[T]) -> T | None:
    """``app.state.<name>`` of an app made by ``create_app`` if it is a `kind`, looking
    through ASGI wrappers (their ``app`` attribute); None if there is none."""
    seen = 0
    while app is not None and seen < 16:
        value = getattr(getattr(app, "state", None), name, None)
        if isinstance(value, kind):
            return value
        app = getattr(app, "app", None)
        seen += 1
    return None


def find_supervisor(app: Any) -> Drainable | None:
    """The supervisor of an app made by ``create_app``, looking through ASGI wrappers."""
    return app_state(app, "supervisor", Drainable)  # type: ignore[type-abstract]


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose shutdown drains the sessions first.

    Args:
        config: the uvicorn config (see ``uvicorn_config``).
        drain_timeout: seconds to wait for replies still being written
            (default: the app's ``ServerLimits.drain_timeout``).
    """

    def __init__(self, config: uvicorn.Config, *, drain_timeout: float | None = None) -> None:
        super().__init__(config)
        self.drain_timeout = drain_timeout

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop accepting first, so no session starts while the others drain.
        for server in getattr(self, "servers", ()):
            server.close()
        for sock in sockets or ():
            sock.close()
        app = self.config.loaded_app if self.config.loaded else self.config.app
        supervisor = find_supervisor(app) or find_supervisor(self.config.app)
        if supervisor is not None:
            await supervisor.drain(self.drain_timeout)
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # As uvicorn's, minus re-raising the signal afterwards: a drained
        # server has finished its work and exits normally.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
