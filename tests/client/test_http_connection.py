"""The HTTP/1.1 client connection against a loopback server that answers canned bytes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from openenv_ws.client._http_conn import HTTPConnection
from openenv_ws.errors import PayloadTooBig, ProtocolError, RequestTimeout, ServerUnavailable
from openenv_ws.server import bind_socket
from tests.conftest import UNIT


class CannedServer:
    """Accepts connections; answers the n-th request with ``replies[n]`` (then maybe closes)."""

    def __init__(self, replies: list[tuple[bytes, bool]]) -> None:
        self.replies = replies
        self.requests: list[bytes] = []
        self.connections = 0
        self.client: HTTPConnection | None = None
        self.sock = bind_socket()
        self.port: int = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(30 * UNIT)
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while self.replies:
                    request = self._read_request(conn)
                    if request is None:
                        break
                    self.requests.append(request)
                    reply, close = self.replies.pop(0)
                    conn.sendall(reply)
                    if close:
                        break

    @staticmethod
    def _read_request(conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(body) < length:
            body += conn.recv(65536)
        return data

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.sock.close()


@pytest.fixture
def canned() -> Iterator[list[CannedServer]]:
    servers: list[CannedServer] = []
    yield servers
    for s in servers:
        s.close()


def serve(canned: list[CannedServer], *replies: tuple[bytes, bool]) -> HTTPConnection:
    server = CannedServer(list(replies))
    canned.append(server)
    conn = HTTPConnection("http", "127.0.0.1", server.port, {"Accept": "application/json"})
    server.client = conn
    return conn


def test_one_request_is_one_write_with_head_and_body(canned: list[CannedServer]) -> None:
    conn = serve(
        canned, (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: a/b\r\n\r\nok", False)
    )
    assert conn.request("POST", "/x", b"body", 5 * UNIT, 100) == (200, "a/b", bytearray(b"ok"))
    request = canned[0].requests[0]
    assert request.startswith(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Accept: application/json\r\n" in request and request.endswith(b"\r\n\r\nbody")


def test_chunked_replies_are_joined(canned: list[CannedServer]) -> None:
    reply = b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    conn = serve(canned, (reply, False), (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz", False))
    assert conn.request("GET", "/", None, 5 * UNIT, 100) == (404, "", bytearray(b"abcde"))
    assert conn.request("GET", "/", None, 5 * UNIT, 100)[2] == b"z"
    assert canned[0].connections == 1  # kept alive across both


def test_a_body_delimited_by_close_and_connection_close_reopen(canned: list[CannedServer]) -> None:
    conn = serve(
        canned,
        (b"HTTP/1.1 200 OK\r\n\r\nuntil-close", True),
        (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nhi", True),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nyes", False),
    )
    assert conn.request("GET", "/", None, 5 * UNIT, 100)[2] == b"until-close"
    assert conn.request("GET", "/", None, 5 * UNIT, 100)[2] == b"hi"
    assert conn.request("GET", "/", None, 5 * UNIT, 100)[2] == b"yes"
    assert canned[0].connections == 3


def test_a_reply_larger_than_the_limit_is_refused_before_it_is_read(
    canned: list[CannedServer],
) -> None:
    conn = serve(canned, (b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n", False))
    with pytest.raises(PayloadTooBig):
        conn.request("GET", "/", None, 5 * UNIT, 1000)


def test_a_chunked_reply_is_refused_once_it_grows_past_the_limit(
    canned: list[CannedServer],
) -> None:
    chunk = b"400\r\n" + b"x" * 0x400 + b"\r\n"
    reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n"
    conn = serve(canned, (reply, False), (reply, False))
    with pytest.raises(PayloadTooBig):
        conn.request("GET", "/", None, 5 * UNIT, 2000)
    assert not conn.connected  # what is left of the reply is never read as the next one's
    assert len(conn.request("GET", "/", None, 5 * UNIT, 4000)[2]) == 3 * 0x400


def test_a_reply_that_is_not_http_is_a_protocol_error(canned: list[CannedServer]) -> None:
    conn = serve(canned, (b"SSH-2.0-OpenSSH\r\n\r\n", False))
    with pytest.raises(ProtocolError, match=r"not HTTP/1\.1"):
        conn.request("GET", "/", None, 5 * UNIT, 1000)


def test_a_server_closing_mid_reply_is_server_unavailable(canned: list[CannedServer]) -> None:
    conn = serve(canned, (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", True))
    with pytest.raises(ServerUnavailable, match="closed the connection"):
        conn.request("GET", "/", None, 5 * UNIT, 1000)


def test_a_silent_server_is_a_request_timeout(canned: list[CannedServer]) -> None:
    server = bind_socket()  # accepts (backlog) but never answers
    try:
        conn = HTTPConnection("http", "127.0.0.1", server.getsockname()[1], {})
        with pytest.raises(RequestTimeout):
            conn.request("GET", "/", None, 0.2 * UNIT, 1000)
    finally:
        server.close()
