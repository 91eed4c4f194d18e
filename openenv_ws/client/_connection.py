"""One client WebSocket connection, sans I/O: the state and every protocol decision.

A :class:`ClientConnection` holds what one connection is (handshake sent,
open, closing, closed, failed), the bytes received and not read yet, and the
messages read and not handed out. Its transports, the blocking
:class:`~._ws.BlockingWebSocket` and the asyncio :class:`~._aws.AsyncWebSocket`,
only move bytes: they put what the socket gave into :attr:`ClientConnection.buf`
(or :meth:`~ClientConnection.receive_data`), ask for the next message, write
what the connection hands them, and raise the errors it names. The handshake
answer's checks, the answer to a ping, the echo of a close frame, the close
code of a violation and each error's message are decided here, once, with the
wire layer's framer (:mod:`openenv_ws.wire.framing`) and handshake
(:mod:`openenv_ws.wire.handshake`).

The receive buffer is one ``bytearray`` read in place: the blocking transport
reads the socket straight into it and the C step exchange
(``openenv_ws._wire.exchange``) parses and advances it too, so a step's reply
is never copied before it is decoded.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable, Mapping
from typing import Final, TypeVar
from urllib.parse import urlsplit

from ..errors import OpenEnvError, ProtocolError, ServerUnavailable, SessionClosed
from ..wire.framing import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    Assembler,
    FrameError,
    close_payload,
    parse_close,
    parse_head,
    serialize,
)
from ..wire.handshake import check_handshake_answer, handshake_request
from ._tls import looks_like_tls, plain_to_tls

__all__ = [
    "ENDED",
    "NEED_DATA",
    "SEND",
    "ClientConnection",
    "ConnectionFacts",
    "Signal",
    "State",
]

#: The largest handshake answer head read (status line and headers).
MAX_HEAD = 65536
T = TypeVar("T")


class State(enum.Enum):
    """Where one client connection stands."""

    CONNECTING = "connecting"  # the handshake request is sent, its answer not read
    OPEN = "open"
    CLOSING = "closing"  # this end sent a close frame; the server is to hang up
    CLOSED = "closed"  # the server's close frame came (and was echoed), or the connection dropped
    FAILED = "failed"  # the server broke the protocol; this end sent the close frame naming it


# The states as module globals: an enum member looked up on its class costs 80 ns,
# a global 10 (the read path checks the state once per message).
_CONNECTING, _OPEN, _CLOSING, _CLOSED, _FAILED = State


class Signal:
    """What :meth:`ClientConnection.read_message` returns instead of a message."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Read more bytes: at least :attr:`ClientConnection.wanted` unread ones are needed.
NEED_DATA: Final = Signal("NEED_DATA")
#: Write :meth:`ClientConnection.data_to_send` (a pong), then ask again.
SEND: Final = Signal("SEND")
#: The connection has ended: write :meth:`ClientConnection.data_to_send` (a close
#: frame), end the socket, raise :meth:`ClientConnection.end_error`.
ENDED: Final = Signal("ENDED")


class ClientConnection:
    """The client end of one WebSocket connection, without I/O.

    Args:
        url: the ``ws://`` or ``wss://`` URL connected to.
        max_size: the largest incoming message in bytes.
        buffer_size: the receive buffer's first size (it grows for a larger frame).
    """

    def __init__(self, url: str, max_size: int, buffer_size: int = 1 << 18) -> None:
        parts = urlsplit(url)
        self.url = url
        self.max_size = max_size
        self.secure = parts.scheme == "wss"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.secure else 80)
        self.netloc = parts.netloc
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.state = _CONNECTING
        #: Whether the connection takes no more messages (closing, closed or failed).
        self.closed = False
        #: The handshake answer's headers (lower-case names).
        self.response_headers: dict[str, str] = {}
        self.close_code: int | None = None
        self.close_reason = ""
        #: Received bytes not read yet lie at ``buf[start:end]``; :attr:`view` is ``buf``'s view.
        self.buf = bytearray(buffer_size)
        self.view = memoryview(self.buf)
        self.start = 0
        self.end = 0
        #: After :data:`NEED_DATA`: how many unread bytes the next frame needs.
        self.wanted = 0
        #: Messages read and not handed out yet (oldest first), and their bytes.
        self.kept: collections.deque[bytes] = collections.deque()
        self.kept_size = 0
        self._assembler = Assembler(max_size)
        self._outgoing: list[bytes] = []
        self._failure: ProtocolError | None = None
        self._key = ""

    # ------------------------------------------------------------------ state

    @property
    def waits_for_server(self) -> bool:
        """Whether this end sent the first close frame: the server is to answer it and
        end the TCP connection (RFC 6455 7.1.1), so a transport waits a little for that."""
        return self.state is _CLOSING or self.state is _FAILED

    @property
    def between_messages(self) -> bool:
        """Whether the next frame may be read by a reader of whole data frames (the C
        step exchange): open, no message kept, no fragmented message under way."""
        return self.state is _OPEN and not self.kept and not self._assembler.active

    def closed_error(self) -> SessionClosed:
        """The error for a use of the connection once it has ended."""
        return SessionClosed(self.close_code, self.close_reason or "the connection is closed")

    def end_error(self) -> OpenEnvError:
        """What a read reports once the connection has ended: the server's protocol
        violation the first time it is asked, :meth:`closed_error` after."""
        failure, self._failure = self._failure, None
        return failure if failure is not None else self.closed_error()

    def _end(self, state: State, code: int | None, reason: str) -> None:
        if not self.closed:
            self.state = state
            self.closed = True
            self.close_code, self.close_reason = code, reason

    # ------------------------------------------------------------------ connecting

    def connect_failed(self, exc: OSError) -> ServerUnavailable:
        """The error for a TCP connection that could not be made."""
        return ServerUnavailable(
            f"cannot connect to {self.host}:{self.port} ({exc}); "
            f"is the server running at {self.url}?"
        )

    def handshake_request(self, headers: Mapping[str, str]) -> bytes:
        """The upgrade request to send first (with the extra `headers`)."""
        request, self._key = handshake_request(self.netloc, self.target, headers)
        return request

    def read_handshake(self) -> bool:
        """Read the handshake answer from the buffer: True once it is read and accepted
        (the connection is then open), False while more bytes are needed.

        Raises:
            TLSError: the server answered in TLS on a ``ws://`` URL.
            ProtocolError: the answer's head is above 64 KiB, a wrong
                ``Sec-WebSocket-Accept``, an extension not offered.
            AuthError, ServerUnavailable: the server refused the upgrade
                (see :func:`~openenv_ws.wire.handshake.check_handshake_answer`).
        """
        stop = self.buf.find(b"\r\n\r\n", self.start, self.end)
        if stop < 0:
            if not self.secure and looks_like_tls(self.view[self.start : self.start + 3]):
                raise plain_to_tls(self.url)
            if self.end - self.start > MAX_HEAD:
                raise ProtocolError("the handshake answer headers exceed 64 KiB")
            return False
        head = bytes(self.view[self.start : stop]).decode("latin-1")
        self.start = stop + 4
        self.response_headers = check_handshake_answer(head, self._key, self.url)
        self.state = _OPEN
        return True

    def handshake_ended(self) -> ServerUnavailable:
        """The error for a connection the server ended before its handshake answer."""
        hint = "" if self.secure else "; if it serves TLS, connect with wss://"
        return ServerUnavailable(f"{self.url} closed the connection during the handshake{hint}")

    def handshake_failed(self, exc: OSError | None) -> ServerUnavailable:
        """The error for a handshake that timed out (`exc` None) or failed on the socket."""
        if exc is None or isinstance(exc, TimeoutError):
            return ServerUnavailable(f"no WebSocket handshake answer from {self.url} in time")
        return ServerUnavailable(f"WebSocket handshake with {self.url} failed: {exc}")

    # ------------------------------------------------------------------ bytes in

    def room(self, n: int) -> memoryview:
        """The buffer's free space after the unread bytes, made large enough for `n`
        unread bytes in all (the unread ones moved to the front, or a larger buffer);
        read into it, then :meth:`received`."""
        if self.start + n > len(self.buf):
            self._compact(n)
        return self.view[self.end :]

    def received(self, n: int) -> None:
        """`n` bytes were read into :meth:`room`."""
        self.end += n

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes (a copy), for a transport handed bytes it does not own."""
        n = len(data)
        if self.start == self.end:
            self.start = self.end = 0
        if self.end + n > len(self.buf):
            self._compact(self.end - self.start + n)
        self.view[self.end : self.end + n] = data
        self.end += n

    def _compact(self, need: int) -> None:
        pending = self.end - self.start
        if need > len(self.buf):
            buf = bytearray(max(need, 2 * len(self.buf)))
            buf[:pending] = self.view[self.start : self.end]
            self.view.release()
            self.buf = buf
            self.view = memoryview(buf)
        else:
            self.buf[:pending] = self.buf[self.start : self.end]
        self.start, self.end = 0, pending

    @property
    def buffered(self) -> int:
        """Bytes received and not handed out: unread, and in messages kept."""
        return self.end - self.start + self.kept_size

    # ------------------------------------------------------------------ frames in

    def read_message(self, handler: Callable[[memoryview], T]) -> T | Signal:
        """``handler(view_of_message)`` for the next data message in the buffer, or a
        :class:`Signal`: :data:`NEED_DATA`, :data:`SEND` (a ping was answered) or
        :data:`ENDED` (a close frame, a violation, or the connection was over already).

        The view is only valid during the call. The frames read are consumed even if
        `handler` raises.
        """
        if self.state is not _OPEN:
            return ENDED
        while True:
            try:
                head = parse_head(self.buf, self.start, self.end, False, self.max_size)
            except FrameError as exc:
                return self.fail(exc.code, exc.reason)
            if head is None or head[2] > self.end:
                self.wanted = self.end - self.start + 1 if head is None else head[2] - self.start
                return NEED_DATA
            first, begin, stop = head
            payload = self.view[begin:stop]
            try:
                if first == 0x82 and not self._assembler.active:  # final binary: the common case
                    return handler(payload)
                opcode = first & 0x0F
                if opcode < OP_CLOSE:
                    try:
                        whole = self._assembler.add(opcode, first > 0x7F, payload)
                    except FrameError as exc:
                        return self.fail(exc.code, exc.reason)
                    if whole is not None:
                        return handler(memoryview(whole[1]))
                elif opcode == OP_PING:
                    self._outgoing.append(serialize(OP_PONG, bytes(payload), mask=True))
                    return SEND
                elif opcode == OP_CLOSE:
                    return self._close_received(bytes(payload))
            finally:
                payload.release()
                self.start = stop

    def _close_received(self, payload: bytes) -> Signal:
        try:
            code, reason = parse_close(payload)
        except FrameError as exc:
            return self.fail(exc.code, exc.reason)
        self._outgoing.append(serialize(OP_CLOSE, payload[:2], mask=True))  # the echo
        self._end(_CLOSED, code, reason)
        return ENDED

    def read_into_kept(self) -> Signal:
        """Read every whole data message in the buffer into :attr:`kept`, until a
        :class:`Signal`: :data:`NEED_DATA`, :data:`SEND`, or :data:`ENDED` (also when
        the kept messages exceed the message size limit: the connection fails)."""
        kept = self.kept
        while True:
            message = self.read_message(bytes)
            if isinstance(message, Signal):
                return message
            kept.append(message)
            self.kept_size += len(message)
            if self.kept_size > self.max_size:
                return self.fail(
                    1009, "the server sent more unasked messages than the client keeps"
                )

    def take_kept(self) -> bytes:
        """The oldest message kept (there must be one), now removed."""
        message = self.kept.popleft()
        self.kept_size -= len(message)
        return message

    def take_all_kept(self) -> list[bytes]:
        """Every message kept, oldest first, now removed."""
        out = list(self.kept)
        self.kept.clear()
        self.kept_size = 0
        return out

    # ------------------------------------------------------------------ frames out

    def send(self, data: bytes, opcode: int = OP_BINARY) -> bytes:
        """The frame that sends message `data` (masked).

        Raises:
            SessionClosed: the connection is closing or over.
        """
        if self.state is not _OPEN:
            raise self.closed_error()
        return serialize(opcode, data, mask=True)

    def data_to_send(self) -> bytes:
        """The frames the connection decided to send (a pong, a close frame), now taken."""
        out = b"".join(self._outgoing)
        self._outgoing.clear()
        return out

    def close(self, code: int = 1000, reason: str = "") -> bytes:
        """Start the closing handshake with `code`: the close frame to send, or
        nothing when the connection is over or closing already."""
        if self.closed:
            return b""
        self._end(_CLOSING, code, reason)
        return serialize(OP_CLOSE, close_payload(code, reason), mask=True)

    def fail(self, code: int, reason: str) -> Signal:
        """End the connection for the server's violation of the protocol: the close
        frame with `code` is queued, and the next read raises ``ProtocolError(reason)``."""
        if not self.closed:
            self._outgoing.append(serialize(OP_CLOSE, close_payload(code, reason), mask=True))
            self._failure = ProtocolError(reason)
            self._end(_FAILED, code, reason)
        return ENDED

    def lost(self, exc: BaseException | None = None, *, sending: bool = False) -> SessionClosed:
        """The connection ended without a close frame: its stream ended (`exc` None),
        or an error while `sending` or receiving. The error to raise."""
        if exc is None:
            detail = "the server closed the connection without a close frame"
        else:
            detail = f"{'sending' if sending else 'receiving'} failed: {exc}"
        self._end(_CLOSED, None, f"the connection dropped ({detail})")
        return self.closed_error()

    def abort(self) -> None:
        """This end dropped the connection (no close handshake)."""
        self._end(_CLOSED, None, "the connection was aborted")


class ConnectionFacts:
    """What a transport tells about the :class:`ClientConnection` it drives."""

    connection: ClientConnection

    @property
    def url(self) -> str:
        return self.connection.url

    @property
    def max_size(self) -> int:
        return self.connection.max_size

    @property
    def response_headers(self) -> dict[str, str]:
        """The handshake answer's headers (lower-case names)."""
        return self.connection.response_headers

    @property
    def closed(self) -> bool:
        return self.connection.closed

    @property
    def close_code(self) -> int | None:
        return self.connection.close_code

    @property
    def close_reason(self) -> str:
        return self.connection.close_reason
