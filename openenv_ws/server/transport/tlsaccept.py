"""TLS connections seen from accept, not from the end of their handshake.

When a server is created with ``ssl=``, the event loop wraps each accepted
connection in its own TLS protocol and shows the application's protocol the
connection only once the TLS handshake is complete. Until then nothing above
the loop knows the connection exists: a peer that opens thousands of
connections and never starts TLS holds a descriptor for each, outside every
connection limit, until the descriptor table is full and no one (``/health``
over TLS included) gets in.

:func:`tls_loop` makes an event loop class whose TLS servers build that TLS
layer themselves, as a :class:`~asyncio.Protocol` on the plain accepted
connection, and tell the application's protocol at accept
(``raw_made(transport)``, with the plain transport) and when the connection
ends (``raw_lost()``, even if the handshake never completed). The connection
guard counts, sheds and times out TLS connections from there, as it does plain
ones. The TLS layer is the loop's own (uvloop's, or asyncio's), so nothing
changes once the handshake is done.
"""

from __future__ import annotations

import asyncio
import importlib.util
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

__all__ = ["loop_name", "tls_loop"]


def loop_name() -> str:
    """uvicorn's name of the event loop to use: uvloop where installed."""
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def _layered(base: type[Any]) -> type[Any]:
    """`base` (an SSL protocol class) telling its application protocol of the plain connection."""

    class AcceptedTLS(base):  # type: ignore[misc]
        """The TLS layer of one accepted connection (see the module docstring)."""

        app: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            made = getattr(self.app, "raw_made", None)
            if made is not None:
                made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            try:
                super().connection_lost(exc)
            finally:
                lost = getattr(self.app, "raw_lost", None)
                if lost is not None:
                    lost()

    return AcceptedTLS


def tls_loop(
    handshake_timeout: float | None, *, kind: str | None = None
) -> type[asyncio.AbstractEventLoop]:
    """An event loop class whose TLS servers show connections at accept.

    Args:
        handshake_timeout: seconds a TLS handshake may take before the
            connection is aborted (None: the loop's default, 60 s).
        kind: ``"uvloop"`` or ``"asyncio"``; None: :func:`loop_name`.
    """
    base: type[asyncio.AbstractEventLoop]
    layer: type[Any]
    if (kind or loop_name()) == "uvloop":
        import uvloop
        import uvloop.loop

        base = uvloop.Loop
        layer = _layered(uvloop.loop.SSLProtocol)  # type: ignore[attr-defined]
    else:
        base = asyncio.SelectorEventLoop
        layer = _layered(sslproto.SSLProtocol)

    class TLSLoop(base):  # type: ignore[valid-type,misc]
        async def create_server(
            self, protocol_factory: Callable[[], Any], *args: Any, **kwargs: Any
        ) -> Any:
            context: ssl.SSLContext | None = kwargs.pop("ssl", None)
            if context is None:
                return await super().create_server(protocol_factory, *args, **kwargs)
            timeout = kwargs.pop("ssl_handshake_timeout", None) or handshake_timeout
            shutdown = kwargs.pop("ssl_shutdown_timeout", None)

            def accept() -> Any:
                app = protocol_factory()
                tls = layer(
                    self,
                    app,
                    context,
                    None,
                    server_side=True,
                    ssl_handshake_timeout=timeout,
                    ssl_shutdown_timeout=shutdown,
                )
                tls.app = app
                return tls

            return await super().create_server(accept, *args, **kwargs)

    return TLSLoop
