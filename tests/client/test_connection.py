"""The sans-I/O client connection: bytes in, messages and decisions out, no socket.

Every protocol decision both transports share (the handshake answer, a ping's
pong, a close frame's echo, a violation's close code and error, the bound on
kept messages, the messages of a dropped connection) is checked here once;
the transports' own tests check that they carry the decisions out.
"""

from __future__ import annotations

import base64
import hashlib
import struct

import pytest

from openenv_ws.client._connection import (
    ENDED,
    NEED_DATA,
    SEND,
    ClientConnection,
    State,
)
from openenv_ws.errors import AuthError, ProtocolError, SessionClosed, TLSError
from openenv_ws.wire.framing import FrameReader, frame_head
from openenv_ws.wire.handshake import GUID

URL = "ws://127.0.0.1:9/ws?x=1"


def server_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    return frame_head(opcode, len(payload), fin=fin) + payload


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, unmasked payload) of the client frames in `data` (they must be masked)."""
    reader = FrameReader(masked=True)
    reader.feed(data)
    out = []
    while (frame := reader.next_frame()) is not None:
        out.append((frame.opcode, frame.payload))
    assert reader.pending == 0
    return out


def answer(request: bytes, status: str = "101 Switching Protocols") -> bytes:
    key = next(
        line.split(b":", 1)[1].strip()
        for line in request.split(b"\r\n")
        if line.lower().startswith(b"sec-websocket-key:")
    )
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
    return (
        f"HTTP/1.1 {status}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


def opened(max_size: int = 1024, after: bytes = b"") -> ClientConnection:
    """A connection whose handshake was answered, `after` received behind the answer."""
    conn = ClientConnection(URL, max_size, buffer_size=16)
    request = conn.handshake_request({"Authorization": "Bearer t"})
    assert request.startswith(b"GET /ws?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n")
    assert b"\r\nAuthorization: Bearer t\r\n" in request
    data = answer(request) + after
    for i in range(len(data) - len(after)):  # the answer byte by byte
        assert not conn.read_handshake()
        conn.receive_data(data[i : i + 1])
    conn.receive_data(after)
    assert conn.read_handshake() and conn.state is State.OPEN
    assert conn.response_headers["upgrade"] == "websocket"
    return conn


def test_where_a_url_connects() -> None:
    conn = ClientConnection("wss://example.org/ws", 10)
    assert (conn.secure, conn.host, conn.port, conn.target) == (True, "example.org", 443, "/ws")
    assert "cannot connect to example.org:443" in str(conn.connect_failed(OSError("refused")))


def test_a_refused_or_foreign_handshake_answer_raises_why() -> None:
    conn = ClientConnection(URL, 10)
    request = conn.handshake_request({})
    conn.receive_data(answer(request, "401 Unauthorized"))
    with pytest.raises(AuthError, match="HTTP 401"):
        conn.read_handshake()
    tls = ClientConnection(URL, 10)
    tls.handshake_request({})
    tls.receive_data(b"\x15\x03\x03\x00\x02\x02\x46")  # a TLS alert
    with pytest.raises(TLSError, match="expects TLS; connect to wss://"):
        tls.read_handshake()
    endless = ClientConnection(URL, 10)
    endless.handshake_request({})
    endless.receive_data(b"HTTP/1.1 101 OK\r\n" + b"X: y\r\n" * 20000)
    with pytest.raises(ProtocolError, match="exceed 64 KiB"):
        endless.read_handshake()
    assert "if it serves TLS, connect with wss://" in str(endless.handshake_ended())
    assert "in time" in str(endless.handshake_failed(TimeoutError()))


def test_messages_whole_fragmented_and_split_anywhere() -> None:
    data = (
        server_frame(2, b"one")
        + server_frame(2, b"t", fin=False)
        + server_frame(0, b"w", fin=False)
        + server_frame(0, b"o")
        + server_frame(2, b"x" * 300)
    )
    conn = opened(after=data[:5])
    got = []
    fed = 5
    while len(got) < 3:
        out = conn.read_message(bytes)
        if out is NEED_DATA:
            assert conn.wanted > conn.end - conn.start
            conn.receive_data(data[fed : fed + 1])
            fed += 1
        else:
            got.append(out)
    assert got == [b"one", b"two", b"x" * 300] and fed == len(data)
    assert conn.read_message(bytes) is NEED_DATA and conn.buffered == 0


def test_a_ping_is_answered_with_its_payload_and_reading_goes_on() -> None:
    conn = opened(after=server_frame(9, b"are you there") + server_frame(2, b"after"))
    assert conn.read_message(bytes) is SEND
    assert client_frames(conn.data_to_send()) == [(10, b"are you there")]
    assert conn.data_to_send() == b""
    assert conn.read_message(bytes) == b"after"


def test_a_close_frame_is_echoed_and_ends_the_connection() -> None:
    close = server_frame(8, struct.pack("!H", 1011) + b"it broke")
    conn = opened(after=close + server_frame(2, b"too late"))
    assert conn.read_message(bytes) is ENDED
    assert client_frames(conn.data_to_send()) == [(8, struct.pack("!H", 1011))]
    assert conn.state is State.CLOSED and not conn.waits_for_server
    for error in (conn.end_error(), conn.end_error()):
        assert isinstance(error, SessionClosed)
        assert (error.close_code, error.reason) == (1011, "it broke")
    assert conn.read_message(bytes) is ENDED and conn.data_to_send() == b""
    with pytest.raises(SessionClosed):
        conn.send(b"x")
    assert conn.close() == b""  # nothing to close any more


@pytest.mark.parametrize(
    ("bad", "code", "message"),
    [
        (frame_head(2, 1, key=b"abcd") + b"x", 1002, "masked frame"),
        (bytes([0x82 | 0x40, 1, 0]), 1002, "reserved bits"),
        (server_frame(2, b"y" * 2000), 1009, "above the client's limit of 1024"),
        (server_frame(2, b"a", fin=False) + server_frame(2, b"b"), 1002, "inside a fragmented"),
        (server_frame(0, b"orphan"), 1002, "no message to continue"),
        (server_frame(5, b""), 1002, "unknown opcode 5"),
        (server_frame(9, b"p", fin=False), 1002, "fragmented control"),
        (server_frame(8, b"\x03"), 1002, "one-byte payload"),
        (server_frame(8, struct.pack("!H", 1006)), 1002, "may not be sent"),
        (server_frame(8, b"\x03\xe8\xff"), 1007, "not UTF-8"),
        (server_frame(1, b"\xff"), 1007, "not UTF-8"),
    ],
)
def test_a_violation_fails_the_connection_with_its_code(
    bad: bytes, code: int, message: str
) -> None:
    conn = opened(after=server_frame(2, b"ok") + bad)
    assert conn.read_message(bytes) == b"ok"  # what came before the violation is delivered
    assert conn.read_message(bytes) is ENDED
    ((opcode, payload),) = client_frames(conn.data_to_send())
    assert opcode == 8 and struct.unpack("!H", payload[:2])[0] == code
    assert conn.state is State.FAILED and conn.waits_for_server and conn.close_code == code
    with pytest.raises(ProtocolError, match=message):
        raise conn.end_error()
    assert isinstance(conn.end_error(), SessionClosed)  # the violation is reported once


def test_kept_messages_are_bounded_by_the_message_limit() -> None:
    conn = opened(max_size=10, after=server_frame(2, b"a" * 6) + server_frame(9, b""))
    assert conn.read_into_kept() is SEND and conn.data_to_send()  # the pong
    assert conn.read_into_kept() is NEED_DATA
    assert conn.kept_size == conn.buffered == 6 and not conn.between_messages
    conn.receive_data(server_frame(2, b"b" * 6))
    assert conn.read_into_kept() is ENDED
    ((opcode, payload),) = client_frames(conn.data_to_send())
    assert opcode == 8 and struct.unpack("!H", payload[:2])[0] == 1009
    assert conn.take_kept() == b"a" * 6 and conn.take_all_kept() == [b"b" * 6]
    with pytest.raises(ProtocolError, match="more unasked messages"):
        raise conn.end_error()


def test_closing_and_dropping() -> None:
    conn = opened()
    assert conn.between_messages
    assert client_frames(conn.send(b"hi")) == [(2, b"hi")]
    assert client_frames(conn.close(4000, "bye")) == [(8, struct.pack("!H", 4000) + b"bye")]
    assert conn.state is State.CLOSING and conn.waits_for_server and conn.closed
    assert conn.close() == b"" and conn.read_message(bytes) is ENDED
    conn.lost(None)  # the server hung up, as it should: the close stays ours
    assert (conn.close_code, conn.close_reason) == (4000, "bye")
    dropped = opened().lost(None)
    assert dropped.close_code is None
    assert dropped.reason == (
        "the connection dropped (the server closed the connection without a close frame)"
    )
    failed = opened().lost(OSError(32, "Broken pipe"), sending=True)
    assert "dropped (sending failed: [Errno 32] Broken pipe)" in failed.reason
    aborted = opened()
    aborted.abort()
    assert aborted.closed and aborted.close_reason == "the connection was aborted"
