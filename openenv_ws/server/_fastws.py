"""uvicorn's sans-I/O WebSocket protocol with a fast path for binary messages.

uvicorn's ``websockets-sansio`` protocol runs every incoming frame through
the websockets parser (a generator per frame), queues it for the ASGI task,
pauses and resumes reading around it, wakes the task, and frames every reply
through a ``Frame`` object into a joined buffer. For a 100 KB observation that
is most of the server's time beyond the emulator.

:class:`FastWebSocketProtocol` keeps all of that for everything unusual
(handshake, text, control and fragmented frames, protocol violations, frames
over the size limit, closing) and takes the common case itself:

- **Incoming**: a complete, final, masked binary frame within the size limit
  is parsed and unmasked here (websockets' C ``apply_mask``). Frames are only
  ever handed to the websockets parser whole, so it always sits at a frame
  boundary and the two parsers can take turns.
- **Direct handling**: an ASGI app may *attach* a handler through the scope
  extension ``openenv_ws.direct`` (see :meth:`attach`). When a binary message
  arrives while the app waits for its next message with nothing queued, the
  handler is called right here, in ``data_received``; it returns the reply
  (and an optional close) or None to have the message queued for the app as
  usual. No task wake-up, no queue, no read pause per message.
- **Outgoing**: binary messages are framed here; a small one (a step
  result) goes out as one buffer, a large one as header and payload in one
  ``writelines`` (a vectored write) without copying the payload.

Fairness between connections is kept: one directly handled message per
callback; if more complete frames of the same connection are already
buffered, the rest waits for the next loop iteration (reading paused meanwhile),
so a client cannot make the others wait by pipelining.

**Busy polling** (:func:`busy_polling`, ``openenv-ws serve --busy-poll``): after
each message the event loop keeps polling its sockets without sleeping for a
while. On a core of its own the server then sees the next request at once
instead of being woken from idle, which on virtual machines costs tens of
microseconds per message. It burns that core meanwhile, so it only pays
where the server does not share its core with the client.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from time import perf_counter
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - websockets built without its C extension
    from websockets.utils import apply_mask

__all__ = ["DIRECT", "BusyPoll", "FastWebSocketProtocol", "busy_poll_problem", "busy_polling"]

#: Scope extension under which the protocol offers direct handling.
DIRECT = "openenv_ws.direct"

#: A direct handler: the message payload in; (reply, close) or None (queue it) out.
#: ``close`` is None or a ``(code, reason)`` pair sent after the reply.
DirectHandler = Callable[[bytes], "tuple[bytes, tuple[int, str] | None] | None"]

_BINARY_FIN = 0x82
_U16 = struct.Struct("!BBH")
_U64 = struct.Struct("!BBQ")


def frame_header(length: int) -> bytes:
    """The header of an unmasked, final binary frame carrying `length` bytes."""
    if length < 126:
        return bytes((_BINARY_FIN, length))
    if length < 65536:
        return _U16.pack(_BINARY_FIN, 126, length)
    return _U64.pack(_BINARY_FIN, 127, length)


class BusyPoll:
    """Keeps an event loop from sleeping for `window` seconds after the last :meth:`touch`.

    While it is on, a callback re-queues itself on every loop iteration, so
    the loop polls its sockets with a zero timeout instead of sleeping in the
    kernel until one is readable.
    """

    __slots__ = ("last", "loop", "rounds", "spinning", "window")

    def __init__(self, loop: asyncio.AbstractEventLoop, window: float) -> None:
        self.loop = loop
        self.window = window
        self.last = 0.0
        self.spinning = False
        #: Loop iterations spent polling so far (a measure of the CPU it costs).
        self.rounds = 0

    def touch(self) -> None:
        """Note activity now: poll for `window` seconds from here."""
        self.last = perf_counter()
        if not self.spinning:
            self.spinning = True
            self.loop.call_soon(self._spin)

    def _spin(self) -> None:
        self.rounds += 1
        if perf_counter() - self.last < self.window:
            self.loop.call_soon(self._spin)
        else:
            self.spinning = False


class FastWebSocketProtocol(WebSocketsSansIOProtocol):
    """``websockets-sansio`` with binary messages parsed, handled and framed inline."""

    #: Seconds of busy polling after each message (0: sleep as usual); see :func:`busy_polling`.
    busy_poll = 0.0
    #: The :class:`BusyPoll` of the loop this class serves on (made by the first connection).
    poller: BusyPoll | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._buf = b""
        self._slow = False  # everything goes through the websockets parser from now on
        self._deferred = False  # a call_soon to go on with buffered frames is pending
        self._direct: DirectHandler | None = None
        self._max_size: int | None = self.config.ws_max_size

    # ------------------------------------------------------------------ app side

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        if getattr(self, "scope", None) is not None:
            extensions: dict[str, Any] = self.scope["extensions"]
            extensions[DIRECT] = self

    def attach(self, handler: DirectHandler | None) -> None:
        """Serve binary messages with `handler` while the app waits for one (None: stop)."""
        self._direct = handler

    async def send(self, message: Any) -> None:
        data = message.get("bytes") if message["type"] == "websocket.send" else None
        if data is not None and self._open_for_data():
            if not self.writable.is_set():
                await self.writable.wait()
            if self._open_for_data():
                self._write_binary(data)
                return
        await super().send(message)

    # ------------------------------------------------------------------ transport side

    def data_received(self, data: bytes) -> None:
        if self._slow or not self.handshake_complete or self.close_sent:
            if self._buf:
                data, self._buf = self._buf + data, b""
            self._slow = self._slow or self.handshake_complete
            super().data_received(data)
            return
        if self._buf:
            self._buf += data
            if self._deferred:
                return  # the pending callback goes on with it, in order
        else:
            self._buf = data
        self._process()

    def _resume(self) -> None:
        self._deferred = False
        if self.disconnected or self.transport.is_closing():
            return
        self._process()
        if not self._deferred and not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def _process(self) -> None:
        """Serve the complete frames at the front of the buffer."""
        buf = self._buf
        max_size = self._max_size
        while buf:
            if self._slow or self.close_sent or self.conn.state is not State.OPEN:
                self._buf = b""
                self._slow = True
                super().data_received(buf)
                return
            size = len(buf)
            if size < 2:
                break
            first = buf[0]
            length = buf[1] & 0x7F
            start = 6  # 2 header bytes + 4 mask bytes
            if length == 126:
                if size < 4:
                    break
                length = int.from_bytes(buf[2:4], "big")
                start = 8
            elif length == 127:
                if size < 10:
                    break
                length = int.from_bytes(buf[2:10], "big")
                start = 14
            too_big = max_size is not None and length > max_size
            fast = (
                first == _BINARY_FIN
                and buf[1] & 0x80
                and not too_big
                and not self.conn.expect_continuation_frame
            )
            if not fast and (too_big or first & 0x70 or not buf[1] & 0x80):
                # A violation the websockets parser reports (1009, 1002): let it.
                self._buf = b""
                self._slow = True
                super().data_received(buf)
                return
            end = start + length
            if size < end:
                break
            frame, buf = buf[:end], buf[end:]
            if not fast:
                # A whole text, control or fragment frame: the websockets parser takes it.
                self._buf = buf
                super().data_received(frame)
                buf = self._buf
                continue
            payload = apply_mask(frame[start:], frame[start - 4 : start]) if length else b""
            self._buf = buf
            if self._deliver(payload) and buf:
                # Served inline: leave the rest to the next loop iteration.
                self._deferred = True
                self.transport.pause_reading()
                self.loop.call_soon(self._resume)
                return
            buf = self._buf
        self._buf = bytes(buf) if buf else b""

    def _deliver(self, payload: bytes) -> bool:
        """Serve one binary message inline if the app allows it, else queue it; True if inline."""
        handler = self._direct
        if handler is not None and self.queue.empty() and self.writable.is_set():
            out = handler(payload)
            if out is not None:
                reply, close = out
                if self._open_for_data():
                    self._write_binary(reply)
                    if close is not None:
                        self._close(*close)
                return True
        self.queue.put_nowait({"type": "websocket.receive", "bytes": payload})
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        return False

    # ------------------------------------------------------------------ writing

    def _open_for_data(self) -> bool:
        return (
            self.handshake_complete
            and not self.close_sent
            and not self.disconnected
            and self.initial_response is None
            and self.conn.state is State.OPEN
        )

    def _write_binary(self, data: bytes) -> None:
        if len(data) < 2048:  # a step result: one small buffer beats a vectored write
            self.transport.write(frame_header(len(data)) + data)
        else:
            self.transport.writelines((frame_header(len(data)), data))

    def _close(self, code: int, reason: str) -> None:
        """What ``websocket.close`` from the app does, for a close decided inline."""
        self._direct = None
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)


class _BusyPolling(FastWebSocketProtocol):
    """The protocol with its loop's :class:`BusyPoll` touched after every read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls = type(self)
        poller = cls.poller
        if poller is None or poller.loop is not self.loop:
            poller = cls.poller = BusyPoll(self.loop, self.busy_poll)
        self._poller = poller

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._poller.touch()


def busy_poll_problem(window: float) -> str | None:
    """What is wrong with `window` as a busy-poll window, or None if it is fine."""
    if 0 <= window <= MAX_BUSY_POLL:
        return None
    return f"must be between 0 and {MAX_BUSY_POLL:g} seconds, got {window}"


def busy_polling(window: float) -> type[FastWebSocketProtocol]:
    """The protocol class for a server that busy-polls `window` seconds after each message."""
    problem = busy_poll_problem(window)
    if problem is not None:
        raise ValueError(f"busy poll {problem}")
    if window == 0:
        return FastWebSocketProtocol
    # A class per server: each one's poller belongs to the loop that server runs on.
    return type("FastWebSocketProtocol", (_BusyPolling,), {"busy_poll": window})


#: Longest busy-poll window accepted, in seconds.
MAX_BUSY_POLL = 10.0
