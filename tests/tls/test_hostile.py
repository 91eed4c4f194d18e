"""Hostile bytes on the TLS port: garbage, plain HTTP and stalled TLS handshakes,
while an honest wss:// session keeps stepping alongside."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from openenv_ws.client import EnvClient
from openenv_ws.server import ServerThread

from ..conftest import UNIT
from ..server.reliability.conftest import wait_until
from .conftest import Pki, tls_thread


class Neighbour:
    """An honest wss:// session stepping on a thread; the first error ends it."""

    def __init__(self, server: ServerThread, pki: Pki) -> None:
        self.url = server.url
        self.ca_file = pki.ca_file
        self.steps = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with EnvClient(self.url, ca_file=self.ca_file, timeout=10 * UNIT) as env:
                env.reset(seed=0)
                while not self._stop.is_set():
                    if env.step(0).done:
                        env.reset()
                    self.steps += 1
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.error = exc

    def check(self, more: int = 50) -> None:
        """Assert that the session is alive and takes `more` steps from now."""
        target = self.steps + more
        wait_until(
            lambda: self.steps >= target or self.error is not None,
            30 * UNIT,
            what=f"{more} more neighbour steps",
        )
        assert self.error is None, self.error

    def __enter__(self) -> Neighbour:
        self._thread.start()
        self.check(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30 * UNIT)


@pytest.fixture
def neighbour(tls_server: ServerThread, pki: Pki) -> Iterator[Neighbour]:
    with Neighbour(tls_server, pki) as honest:
        yield honest


def raw(server: ServerThread) -> socket.socket:
    return socket.create_connection((server.host, server.port), timeout=10 * UNIT)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server ends the connection (EOF or reset) without answering in plain text."""
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        return True
    return data == b"" or data[:1] in (b"\x15", b"\x16")  # nothing, or a TLS alert


def healthy(server: ServerThread, pki: Pki) -> None:
    with urllib.request.urlopen(
        server.http_url + "/health", context=pki.context(), timeout=10 * UNIT
    ) as answer:
        assert answer.status == 200


@pytest.mark.parametrize(
    "payload",
    [
        os.urandom(4096),
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"\x16\x03\x01\xff\xff" + b"\x00" * 300,  # a ClientHello header claiming 64 KB, then junk
    ],
    ids=["garbage", "plain-http", "bogus-hello"],
)
def test_bad_bytes_on_the_tls_port_are_dropped(
    tls_server: ServerThread, pki: Pki, neighbour: Neighbour, payload: bytes
) -> None:
    for _ in range(20):
        with contextlib.closing(raw(tls_server)) as sock:
            sock.sendall(payload)
            if payload.startswith(b"\x16"):
                sock.shutdown(socket.SHUT_WR)  # the rest of the "hello" never comes
            assert closed_by_server(sock)
    neighbour.check()
    healthy(tls_server, pki)


def test_stalled_handshakes_do_not_stall_the_server(
    tls_server: ServerThread, pki: Pki, neighbour: Neighbour
) -> None:
    stalled: list[socket.socket] = []
    try:
        for i in range(40):
            sock = raw(tls_server)
            if i % 2:  # half send the first bytes of a ClientHello, half send nothing
                sock.sendall(b"\x16\x03\x01\x02\x00\x01")
            stalled.append(sock)
        neighbour.check()
        healthy(tls_server, pki)
        # A new session opens and plays while the handshakes hang.
        with EnvClient(tls_server.url, ca_file=pki.ca_file, timeout=10 * UNIT) as env:
            env.reset(seed=1)
            env.step(0)
        neighbour.check()
    finally:
        for sock in stalled:
            sock.close()


def test_a_client_that_drops_mid_handshake_leaves_the_server_healthy(
    tls_server: ServerThread, pki: Pki, neighbour: Neighbour
) -> None:
    context = pki.context()
    for _ in range(10):
        sock = raw(tls_server)
        tls = context.wrap_socket(sock, server_hostname="127.0.0.1", do_handshake_on_connect=False)
        tls.setblocking(False)
        with contextlib.suppress(ssl.SSLWantReadError):
            tls.do_handshake()  # the ClientHello goes out; the client vanishes
        tls.close()
    neighbour.check()
    healthy(tls_server, pki)


@pytest.mark.parametrize(
    "first_bytes", [b"", b"\x16\x03\x01\x02\x00\x01"], ids=["silent", "partial"]
)
def test_the_server_ends_a_tls_handshake_that_does_not_finish(pki: Pki, first_bytes: bytes) -> None:
    # The loop's own default would hold it for 60 s, unseen by the connection guard;
    # the server's --handshake-timeout bounds it instead.
    with tls_thread(pki.server, handshake_timeout=0.5 * UNIT) as server:
        sock = socket.create_connection((server.host, server.port), timeout=20 * UNIT)
        with contextlib.closing(sock):
            sock.sendall(first_bytes)
            assert closed_by_server(sock)  # EOF or reset, long before 60 s
