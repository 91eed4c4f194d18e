"""The message loop of one WebSocket connection: each request to its session, each reply back.

:func:`run` serves an accepted connection until it ends: it registers a
:class:`~openenv_ws.server.session.supervisor.Link` with the process's
:class:`~openenv_ws.server.session.supervisor.Supervisor`, hands every message to the
link's session (inline, on the session's worker thread, or after its turn to
build, see :mod:`openenv_ws.server.runtime.offload` and
:mod:`openenv_ws.server.session.pacing`), sends the reply, and when the supervisor
ends the link (idle, drain, takeover) sends the last words.

Protocol v1 messages carry bytes (``"bytes"``), served by
:meth:`~openenv_ws.server.ServerSession.handle`. A dialect translated by the
``receive``/``send`` pair (OpenEnv's JSON) carries frame objects instead
(``"frame"`` in ``websocket.receive`` and ``websocket.send`` messages),
served by :meth:`~openenv_ws.server.ServerSession.serve`: nothing is encoded
to be decoded again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from ..._shm import ServerRegion
from ...protocol import ServerFrame, encode
from ..transport.asgi import Message, Receive, Scope, Send
from ..transport.fastws import DIRECT
from .calls import call
from .replies import CloseRequest
from .supervisor import DRAIN, DRAIN_WINDOW, IDLE, TAKEOVER, UNOPENED, Link, Supervisor

__all__ = ["run", "serve"]

_TAKEN_OVER = "the session was resumed on another connection"
# Disconnect codes of a connection lost without either side choosing to close:
# none received (1005: uvicorn's code for a lost connection, 1006), heartbeat
# timeout (1011), server restart (1012), a gateway's failures (1014).
_DROPS = frozenset({None, 1005, 1006, 1011, 1012, 1014})
_TEXT = "text messages are not protocol v1 frames; send binary MessagePack frames"


async def run(
    supervisor: Supervisor,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    native: Callable[[], bool] | None = None,
    shared: ServerRegion | None = None,
) -> None:
    """Serve an accepted WebSocket connection until it ends.

    Args:
        native: says whether the connection speaks protocol v1 as it is
            (not a dialect translated by `receive`/`send`); only then may
            its requests be served inline by the WebSocket protocol (see
            :mod:`openenv_ws.server.transport.fastws`). None: always.
        shared: the client's shared region for observations (mapped from
            the handshake offer); the session uses it once the connection
            is known to speak protocol v1.
    """
    link = supervisor.connect(scope)
    inline = scope.get("extensions", {}).get(DIRECT)
    dropped = False
    try:
        dropped = await serve(
            supervisor, link, receive, send, inline=inline, native=native, shared=shared
        )
    finally:
        if inline is not None:
            inline.attach(None)
        supervisor.disconnect(link, dropped=dropped)


async def serve(
    supervisor: Supervisor,
    link: Link,
    receive: Receive,
    send: Send,
    *,
    inline: Any = None,
    native: Callable[[], bool] | None = None,
    shared: ServerRegion | None = None,
) -> bool:
    """The message loop; True when the connection dropped, False when it was closed.

    With `inline` (the WebSocket protocol's direct-handling hook), requests
    that arrive while this loop waits are served by :func:`_inline_handler`
    inside the protocol's ``data_received``, with the same session call;
    this loop then only sees what needs waiting (the first request,
    requests arriving while a reply is blocked, control flow).

    *Dropped* is a loss the peer did not choose: no close frame (reset,
    EOF), a heartbeat timeout, a server restart. A close frame from the
    peer, a protocol violation the WebSocket layer refused (1002, 1007,
    1009, ...) and every close the server decided are *closed*.
    """
    undecided = True
    while True:
        if undecided and (native is None or native()):
            undecided = False
            if inline is not None:
                inline.attach(_inline_handler(link))
            if shared is not None and link.session is not None:
                link.session.use_shared(shared)
        if link.ending is None:
            link.waiting = True
            try:
                message: Message | None = await receive()
                link.waiting = False
            except asyncio.CancelledError:
                link.waiting = False
                if not link.poked:
                    raise  # not a wake-up of ours
                link.poked = False
                task = asyncio.current_task()
                assert task is not None
                task.uncancel()
                message = await _pending(link, receive)
        else:
            message = await _pending(link, receive)
        session = link.session
        if message is None or session is None:  # ended, or taken over meanwhile
            await _farewell(supervisor, link, send, framed=native is not None and not native())
            return False
        if message["type"] != "websocket.receive":  # websocket.disconnect
            return not link.inline_close and message.get("code") in _DROPS
        link.count += 1
        # Bytes (protocol v1), or a frame object from a dialect's translation.
        request = message.get("bytes")
        if request is None:
            request = message.get("frame")
        reply: bytes | ServerFrame
        close: CloseRequest | None
        if request is None:
            reply, close = session.refuse("text_frame", _TEXT)
        elif session.inline:
            reply, close = (
                session.handle(request) if type(request) is bytes else session.serve(request)
            )
        elif session.env is None:  # not open yet: an open may have to wait its turn
            reply, close = await supervisor.cold_opens.serve(session, request, link.peer)
        else:
            reply, close = await call(session, request, supervisor.limits.step_timeout)
        try:
            await send(_reply_message(reply, native is not None and not native()))
            if close is not None:
                await send({"type": "websocket.close", "code": close.code, "reason": close.reason})
        except (OSError, RuntimeError):  # the transport is gone (uvicorn's ClientDisconnected)
            return close is None
        if close is not None:
            return False


def _reply_message(reply: bytes | ServerFrame, framed: bool) -> Message:
    """The ``websocket.send`` of a reply: bytes, or a frame for a dialect (`framed`)."""
    if isinstance(reply, bytes):
        return {"type": "websocket.send", "bytes": reply}
    if framed:
        return {"type": "websocket.send", "frame": reply}
    return {"type": "websocket.send", "bytes": encode(reply)}


def _inline_handler(link: Link) -> Callable[[bytes], Any]:
    """Serve a request inline, as :func:`serve` would, while `link` waits for one."""

    def handle(data: bytes) -> tuple[bytes, tuple[int, str] | None] | None:
        session = link.session
        if (
            session is None
            or not link.waiting
            or link.ending is not None
            or link.poked
            or not session.inline
        ):
            # The loop has something to do first, or the request goes to the
            # session's worker thread: queue it for the loop.
            return None
        link.count += 1
        reply, close = session.handle(data)
        if close is None:
            return reply, None
        link.inline_close = True
        return reply, (close.code, close.reason)

    return handle


async def _farewell(supervisor: Supervisor, link: Link, send: Send, *, framed: bool) -> None:
    session = link.session
    messages: list[Message] = []
    if link.ending == TAKEOVER or session is None:
        messages.append({"type": "websocket.close", "code": 1001, "reason": _TAKEN_OVER})
    else:
        if link.ending == UNOPENED:
            supervisor.metrics.count("idle_closed")
            reply, close = session.refuse(
                "idle_timeout",
                f"no session was opened within the server's open timeout "
                f"({supervisor.limits.open_timeout:g} s); send open right after connecting",
            )
        elif link.ending == IDLE:
            supervisor.metrics.count("idle_closed")
            reply, close = session.refuse(
                "idle_timeout",
                f"no request arrived within the server's idle timeout "
                f"({supervisor.limits.idle_timeout:g} s); open a new session, or start the server "
                "with a larger --idle-timeout (0: never)",
            )
        else:
            reply, close = session.refuse(
                "shutting_down",
                "the server is shutting down; open a new session (on another server)",
            )
        messages.append(_reply_message(reply, framed))
        messages.append({"type": "websocket.close", "code": close.code, "reason": close.reason})
    with contextlib.suppress(OSError, RuntimeError):
        for message in messages:
            await send(message)


async def _pending(link: Link, receive: Receive) -> Message | None:
    """A message that had already arrived when the link was woken, or None.

    ``receive`` returns without suspending when a message is queued, so a
    zero timeout takes exactly the messages the server has read. A draining
    link also waits :data:`DRAIN_WINDOW` for bytes already in the socket's
    buffer, which the server reads only between two messages.
    """
    if link.ending == TAKEOVER:
        return None
    loop = asyncio.get_running_loop()
    if link.ending == DRAIN:
        if link.drain_until is None:
            link.drain_until = loop.time() + DRAIN_WINDOW
        until = link.drain_until
    else:
        until = loop.time()
    try:
        async with asyncio.timeout_at(until):
            message = await receive()
    except TimeoutError:
        return None
    if link.ending in (IDLE, UNOPENED):
        link.ending = None  # a request had arrived: the link was not idle after all
    return message
