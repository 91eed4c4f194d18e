"""uvicorn's sans-I/O WebSocket protocol with a fast path for binary messages.

uvicorn's ``websockets-sansio`` protocol runs every incoming frame through
the websockets parser (a generator per frame), queues it for the ASGI task,
pauses and resumes reading around it, wakes the task, and frames every reply
through a ``Frame`` object into a joined buffer. For a 100 KB observation that
is most of the server's time beyond the emulator.

:class:`FastWebSocketProtocol` splits the frames itself once the handshake is
done (with the project's framer, :mod:`openenv_ws.wire.framing`) and takes the
common case on its own:

- **Incoming**: a complete, final, masked binary frame within the size limit,
  outside a fragmented message, is unmasked and served here. Every other
  frame (text, control, fragments) is handed to the websockets parser whole,
  one at a time, so the parser always sits at a frame boundary and the two
  take turns; from a violation on (the framer names it from the header), the
  websockets parser takes everything and closes with its code. Received bytes wait
  in one ``bytearray`` consumed from the front, so a frame arriving in small
  pieces is copied a bounded number of times.
- **Direct handling**: an ASGI app may *attach* a handler through the scope
  extension ``openenv_ws.direct`` (see :meth:`FastWebSocketProtocol.attach`).
  When a binary message arrives while the app waits for its next message with
  nothing queued, the handler is called right here, in ``data_received``; it
  returns the reply (and an optional close) or None to have the message queued
  for the app as usual. No task wake-up, no queue, no read pause per message.
- **Outgoing**: binary messages are framed here; a small one (a step
  result) goes out as one buffer, a large one as header and payload in one
  ``writelines`` (a vectored write) without copying the payload.

One connection cannot hold up the others, whatever it sends:

- **Fairness**: per loop iteration a connection gets one directly handled
  message, or one message queued for its app (nothing more is read until the
  app takes it), or up to :data:`PARSER_FRAMES_PER_TURN` frames through the
  websockets parser; the rest of what it sent waits, reading paused, for the
  next iteration.
- **Control-frame rate**: pings and pongs beyond ``control_rate`` per second
  (bursts of as many) close the connection with 1008.
- **Back-pressure**: while the transport's write buffer is above its
  high-water mark (the peer is not reading what it is sent), nothing is read
  from the peer, so its pings cannot pile up pongs. A peer that reads nothing
  for ``write_timeout`` seconds is aborted, and a close the peer does not let
  finish (it does not read the close frame, or does not answer it) ends in an
  abort ``close_timeout`` seconds later: a connection never waits forever on
  a peer that stopped reading, and its buffers go with it.

**Busy polling** (:func:`busy_polling`, ``openenv-ws serve --busy-poll``): after
each message the event loop keeps polling its sockets without sleeping for a
while. On a core of its own the server then sees the next request at once
instead of being woken from idle, which on virtual machines costs tens of
microseconds per message. It burns that core meanwhile, so it only pays
where the server does not share its core with the client.
"""

from __future__ import annotations

import asyncio
import logging
from asyncio import TimerHandle
from collections.abc import Callable
from time import perf_counter
from typing import Any, cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

from ...wire.framing import OP_BINARY, FrameError, apply_mask, frame_head, parse_head
from ..limits import DEFAULT_CONTROL_RATE, DEFAULT_WRITE_TIMEOUT, setting_problem

__all__ = [
    "DIRECT",
    "PARSER_FRAMES_PER_TURN",
    "BusyPoll",
    "FastWebSocketProtocol",
    "busy_polling",
    "protocol_class",
]

logger = logging.getLogger("openenv_ws.server")

#: Scope extension under which the protocol offers direct handling.
DIRECT = "openenv_ws.direct"

#: A direct handler: the message payload in; (reply, close) or None (queue it) out.
#: ``close`` is None or a ``(code, reason)`` pair sent after the reply.
DirectHandler = Callable[[bytes], "tuple[bytes, tuple[int, str] | None] | None"]

#: Frames one connection hands the websockets parser per loop iteration.
PARSER_FRAMES_PER_TURN = 16

_BINARY_FIN = 0x82
_RATED = (0x9, 0xA)  # ping, pong
_DISCARD = 1 << 20  # bytes taken after a close before aborting, without a size limit
_VIEW_FROM = 4096  # payloads at least this long are unmasked from a view, not a slice


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


class _BoundedClose:
    """A connection's transport whose ``close()`` ends in an abort if it does not finish.

    A graceful close first writes out what is buffered; a peer that stopped
    reading would keep the connection, and its buffer, forever. Every close
    (uvicorn's included: heartbeat timeout, close handshake, protocol
    violation, shutdown) is followed by an abort ``close_timeout`` seconds
    later unless the connection is gone by then. Everything else is the
    wrapped transport's own.
    """

    __slots__ = ("_protocol", "_transport")

    def __init__(self, transport: asyncio.Transport, protocol: FastWebSocketProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        self._transport.close()
        self._protocol._abort_later()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class FastWebSocketProtocol(WebSocketsSansIOProtocol):
    """``websockets-sansio`` with binary messages parsed, handled and framed inline."""

    #: Seconds of busy polling after each message (0: sleep as usual); see :func:`busy_polling`.
    busy_poll = 0.0
    #: The :class:`BusyPoll` of the loop this class serves on (made by the first connection).
    poller: BusyPoll | None = None
    #: Seconds the peer may read nothing of what is buffered for it before the
    #: connection is aborted (None: no limit).
    write_timeout: float | None = DEFAULT_WRITE_TIMEOUT
    #: Pings and pongs per second the peer may send, in bursts of as many (None: no limit).
    control_rate: float | None = DEFAULT_CONTROL_RATE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._buf = bytearray()  # received bytes not yet served, from a frame boundary on
        self._need = 0  # how many bytes _buf must hold before its first frame is complete
        self._framing = False  # frames are split here (handshake done, parser at a boundary)
        self._slow = False  # after a violation: the websockets parser takes everything
        self._deferred = False  # a call_soon to go on with buffered frames is pending
        self._blocked = False  # the write buffer is above its high-water mark
        self._stall: TimerHandle | None = None  # aborts a peer that stopped reading
        self._doom: TimerHandle | None = None  # aborts a close that does not finish
        self._direct: DirectHandler | None = None
        self._max_size: int | None = self.config.ws_max_size
        self._tokens = self.control_rate or 0.0
        self._refilled = self.loop.time()
        self._discarded = 0  # bytes received after this side closed
        self._raw: asyncio.Transport = cast(asyncio.Transport, None)  # set in connection_made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        raw = self._raw = cast(asyncio.Transport, transport)
        # A stand-in, not a subclass: it adds close() and forwards the rest.
        self.transport = cast(asyncio.Transport, _BoundedClose(raw, self))

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._stall, self._doom):
            if timer is not None:
                timer.cancel()
        self._stall = self._doom = None
        self._buf = bytearray()
        super().connection_lost(exc)

    # ------------------------------------------------------------------ app side

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        if getattr(self, "scope", None) is not None:
            extensions: dict[str, Any] = self.scope["extensions"]
            extensions[DIRECT] = self

    def attach(self, handler: DirectHandler | None) -> None:
        """Serve binary messages with `handler` while the app waits for one (None: stop)."""
        self._direct = handler

    async def receive(self) -> Any:
        message = await self.queue.get()
        if self.read_paused and self.queue.empty():
            self.read_paused = False
            self._go_on()
        return message

    async def send(self, message: Any) -> None:
        data = message.get("bytes") if message["type"] == "websocket.send" else None
        if data is not None and self._open_for_data():
            if self._blocked:
                await self.writable.wait()
            if self._open_for_data():
                self._write_binary(data)
                return
        await super().send(message)
        if message["type"] == "websocket.close":
            self._go_on()  # uvicorn resumes reading for the close reply: frames buffered go first

    # ------------------------------------------------------------------ transport side

    def data_received(self, data: bytes) -> None:
        if not self._framing and not self._take_frames():
            if not self.conn.eof_sent:
                # The opening handshake, or the rest of a frame after a violation.
                super().data_received(data)
            elif self.handshake_complete:
                self._discard(len(data))
            return
        buf = self._buf
        if buf:
            buf += data
            if self._deferred or len(buf) < self._need:
                return  # the pending callback goes on with it, or the frame is not complete yet
            self._process(buf)
        else:
            self._process(data)

    def _take_frames(self) -> bool:
        """Start splitting frames here if the handshake is done; False while the parser keeps them."""
        conn = self.conn
        if not self.handshake_complete or self._slow or conn.eof_sent:
            return False
        if conn.state is not State.OPEN and conn.state is not State.CLOSING:
            return False
        self._framing = True
        if conn.reader.buffer:
            # The parser holds part of a frame sent along with the handshake request, before
            # the response: it cannot be taken over mid-frame, and RFC 6455 (4.1) forbids it.
            self._fail(1002, "data sent before the handshake response")
            return False
        return True

    def _process(self, buf: bytes | bytearray) -> None:
        """Serve the complete frames at the front of `buf` (the bytes just read, or the buffer)."""
        size = len(buf)
        pos = 0
        need = 0
        budget = PARSER_FRAMES_PER_TURN
        conn = self.conn
        while pos < size:
            if self.read_paused or self._blocked:
                break  # the app takes its message first / the peer is not reading
            received = conn.current_size  # None outside a fragmented message
            limit = self._max_size
            if limit is not None and received is not None:
                limit -= received
            try:
                head = parse_head(buf, pos, size, True, limit)
            except FrameError:
                # The websockets parser refuses it from the header too (1002, 1009), and says so.
                self._give_up(buf, pos)
                return
            if head is None:
                need = size - pos + 1
                break
            first, start, end = head
            if end > size:
                need = end - pos
                break
            if first == _BINARY_FIN and received is None and not self.close_sent:
                if end - start >= _VIEW_FROM:
                    with memoryview(buf) as view:
                        payload = apply_mask(view[start:end], buf[start - 4 : start])
                elif end > start:
                    payload = apply_mask(buf[start:end], buf[start - 4 : start])
                else:
                    payload = b""
                pos = end
                if self._deliver(payload):
                    if pos < size:
                        self._defer()  # served inline: the rest waits for the next iteration
                    break
                continue
            if not budget:
                self._defer()
                break
            budget -= 1
            if first & 0x0F in _RATED and not self._admit_control():
                rate = self.control_rate
                logger.info(
                    "%s: more than %g pings and pongs per second; closing", self._peer(), rate
                )
                self._fail(1008, f"more than {rate:g} pings and pongs per second")
                return
            super().data_received(buf[pos:end])  # type: ignore[arg-type]  # bytes-like is fine
            pos = end
            if conn.eof_sent:
                # The connection is closed (a close frame, a violation): the rest is discarded.
                self._buf = bytearray()
                self._need = 0
                self._discard(size - pos)
                return
        self._need = need
        if buf is self._buf:
            del buf[:pos]
        elif pos < size:
            self._buf += memoryview(buf)[pos:]

    def _give_up(self, buf: bytes | bytearray, pos: int) -> None:
        """Hand everything from `pos` on to the websockets parser, for good."""
        self._slow = True
        self._framing = False
        rest = bytes(buf[pos:])
        self._buf = bytearray()
        self._need = 0
        super().data_received(rest)

    def _admit_control(self) -> bool:
        """Take a token for a ping or pong; False once the peer is past its rate."""
        rate = self.control_rate
        if rate is None:
            return True
        now = self.loop.time()
        tokens = min(rate, self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True

    def _fail(self, code: int, reason: str) -> None:
        """Close with `code` and discard whatever the peer sends from now on."""
        self._slow = True
        self._framing = False
        self._buf = bytearray()
        self._need = 0
        self.conn.fail(code, reason)
        self.handle_parser_exception()

    def handle_parser_exception(self) -> None:
        # As uvicorn's, but the connection is half-closed and what the peer still sends
        # is read and discarded until it closes too (within close_timeout, and up to a
        # frame's worth): closing a socket with unread input resets the connection, and
        # the peer would likely lose the close frame telling it why.
        close = self.conn.close_sent
        assert close is not None
        if not self.conn.eof_sent:
            # A close sent without failing (uvicorn's 1007 for a text message that is not
            # UTF-8): fail now, so the parser discards the rest instead of answering pings.
            self.conn.fail(close.code, close.reason)
        self.queue.put_nowait(
            {"type": "websocket.disconnect", "code": close.code, "reason": close.reason}
        )
        self._raw.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self._raw.can_write_eof():
            self._raw.write_eof()
        self.read_paused = False
        if self.close_timer is None:
            # Set, it also keeps uvicorn from closing the socket when the app returns.
            self.close_timer = self.loop.call_later(self.close_timeout, self._abort_unfinished)
        if not self._blocked:
            self._raw.resume_reading()

    def _discard(self, size: int) -> None:
        """Drop what comes after the close; a peer that sends on past a frame's worth is aborted."""
        self._discarded += size
        if self._discarded > (self._max_size or _DISCARD) and not self._raw.is_closing():
            logger.info("%s: went on sending after the close; aborted", self._peer())
            self.transport.abort()

    def _defer(self) -> None:
        """Go on with the buffered frames on the next loop iteration, reading paused meanwhile."""
        if self._deferred:
            return
        self._deferred = True
        self._raw.pause_reading()
        self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        self._deferred = False
        if self.disconnected or self._raw.is_closing():
            return
        if self._framing and self._buf:
            self._process(self._buf)
        self._go_on()

    def _go_on(self) -> None:
        """Read on (buffered frames first), unless the app, the peer or a pending callback holds it."""
        if self._deferred or self.disconnected:
            return
        if self.read_paused or self._blocked:
            self._raw.pause_reading()
        elif self._framing and self._buf and len(self._buf) >= self._need:
            self._defer()
        else:
            self._raw.resume_reading()

    def _deliver(self, payload: bytes) -> bool:
        """Serve one binary message inline if the app allows it, else queue it; True if inline."""
        handler = self._direct
        if handler is not None and self.queue.empty():
            out = handler(payload)
            if out is not None:
                reply, close = out
                if self._open_for_data():
                    self._write_binary(reply)
                    if close is not None:
                        self._close(*close)
                return True
        self.queue.put_nowait({"type": "websocket.receive", "bytes": payload})
        self.read_paused = True
        self._raw.pause_reading()
        return False

    # ------------------------------------------------------------------ flow control

    def pause_writing(self) -> None:
        # The peer is not reading what it is sent: read nothing more from it (its
        # pings would pile up pongs), and give it `write_timeout` to catch up.
        self._blocked = True
        self.writable.clear()
        self._raw.pause_reading()
        if self.write_timeout is not None and self._stall is None:
            self._stall = self.loop.call_later(self.write_timeout, self._abort_stalled)

    def resume_writing(self) -> None:
        self._blocked = False
        self.writable.set()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._go_on()

    def _abort_stalled(self) -> None:
        self._stall = None
        logger.info(
            "%s: the peer read nothing for %g s; connection aborted",
            self._peer(),
            self.write_timeout,
        )
        self.transport.abort()

    def _abort_later(self) -> None:
        """The connection is closing: abort it if it is still there after ``close_timeout``."""
        if self._doom is None and not self.disconnected:
            self._doom = self.loop.call_later(self.close_timeout, self._abort_unfinished)

    def _abort_unfinished(self) -> None:
        self._doom = None
        if self.disconnected:
            return
        logger.info("%s: close not finished in %g s; aborted", self._peer(), self.close_timeout)
        self.transport.abort()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    # ------------------------------------------------------------------ writing

    def _open_for_data(self) -> bool:
        # OPEN: the app accepted the handshake (a refusal never opens the connection).
        return not self.close_sent and not self.disconnected and self.conn.state is State.OPEN

    def _write_binary(self, data: bytes) -> None:
        if len(data) < 2048:  # a step result: one small buffer beats a vectored write
            self._raw.write(frame_head(OP_BINARY, len(data)) + data)
        else:
            self._raw.writelines((frame_head(OP_BINARY, len(data)), data))

    def _close(self, code: int, reason: str) -> None:
        """What ``websocket.close`` from the app does, for a close decided inline."""
        self._direct = None
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)


class _BusyPolling(FastWebSocketProtocol):
    """The protocol with its loop's :class:`BusyPoll` touched after every read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The class protocol_class made holds the poller, also under subclasses of it.
        cls: type[FastWebSocketProtocol] = next(
            c for c in type(self).__mro__ if "busy_poll" in vars(c)
        )
        poller = cls.poller
        if poller is None or poller.loop is not self.loop:
            poller = cls.poller = BusyPoll(self.loop, self.busy_poll)
        self._poller = poller

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._poller.touch()


def protocol_class(
    *,
    busy_poll: float = 0.0,
    write_timeout: float | None = DEFAULT_WRITE_TIMEOUT,
    control_rate: float | None = DEFAULT_CONTROL_RATE,
) -> type[FastWebSocketProtocol]:
    """The protocol class for a server with these settings.

    Args:
        busy_poll: seconds to busy-poll after each message (0: off); see :func:`busy_polling`.
        write_timeout: seconds a peer may read nothing of what it is sent
            before its connection is aborted (None: no limit).
        control_rate: pings and pongs per second a peer may send, in bursts
            of as many, before it is closed with 1008 (None: no limit).

    Raises:
        ValueError: a setting is out of range.
    """
    for name, value in (
        ("busy_poll", busy_poll),
        ("write_timeout", write_timeout),
        ("control_rate", control_rate),
    ):
        problem = setting_problem(name, value)
        if problem is not None:
            raise ValueError(f"{name.replace('_', ' ')} {problem}")
    if (busy_poll, write_timeout, control_rate) == (
        0.0,
        DEFAULT_WRITE_TIMEOUT,
        DEFAULT_CONTROL_RATE,
    ):
        return FastWebSocketProtocol
    base = _BusyPolling if busy_poll else FastWebSocketProtocol
    # A class per server: each one's settings, and its poller, belong to that server.
    settings = {
        "busy_poll": busy_poll,
        "write_timeout": write_timeout,
        "control_rate": control_rate,
    }
    return type("FastWebSocketProtocol", (base,), settings)


def busy_polling(window: float) -> type[FastWebSocketProtocol]:
    """The protocol class for a server that busy-polls `window` seconds after each message."""
    return protocol_class(busy_poll=window)
