"""The TLS port under connections that never start TLS, and under huge request heads.

An attacker opens more TCP connections to a TLS server than it has
descriptors and sends nothing. The event loop completes TLS handshakes
before the server's protocol sees a connection, so unless connections are
counted from accept they are outside ``--max-connections`` and the handshake
deadline's shedding: at 4b092e2, 3,500 of them took every descriptor and a
legitimate ``/health`` over TLS failed. The server must count them from
accept, shed the oldest still handshaking for newcomers, keep ``/health``
over TLS and a wss:// neighbour session answering, and hold no more
descriptors than its cap allows. Over TLS, a request head over the limit is
answered 431 as in plain HTTP.

The server is a real ``openenv-ws serve --certfile`` subprocess whose
descriptor table is smaller than the attack (``ulimit -n``).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil
import pytest

from openenv_ws.client import EnvClient

from ..._rawwire import Answer, read_answer, request_bytes, upgrade_bytes
from ...tls.conftest import Pki, pki  # noqa: F401 - the fixture
from ...tls.test_hostile import Neighbour
from .conftest import MB, UNIT, wait_until

#: The server's descriptor table (soft and hard limit) and its connection cap.
SERVER_FDS = 320
CAP = 64
#: Connections that never start TLS: more than the server's whole descriptor table.
IDLE = 600


@dataclass
class TLSServer:
    """A running ``openenv-ws serve --certfile`` subprocess."""

    process: subprocess.Popen[bytes]
    port: int
    context: ssl.SSLContext
    log: tempfile._TemporaryFileWrapper[bytes]
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"wss://{self.host}:{self.port}/ws"

    def health(self, *, timeout: float = 10.0) -> None:
        """``GET /health`` over TLS; fails the test (naming the problem) unless it answers ok."""
        request = urllib.request.Request(f"https://{self.host}:{self.port}/health")
        try:
            with urllib.request.urlopen(
                request, context=self.context, timeout=timeout * UNIT
            ) as answer:
                assert answer.status == 200
        except OSError as exc:
            raise AssertionError(f"/health over TLS did not answer: {exc!r}") from None

    def tls(self) -> ssl.SSLSocket:
        """A new TLS connection, handshake done."""
        sock = socket.create_connection((self.host, self.port), timeout=10 * UNIT)
        return self.context.wrap_socket(sock, server_hostname=self.host)

    def fds(self) -> int:
        return psutil.Process(self.process.pid).num_fds()

    def rss(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


@contextlib.contextmanager
def tls_serve(files: Pki, *args: str) -> Iterator[TLSServer]:
    """``openenv-ws serve --certfile`` with a descriptor table of :data:`SERVER_FDS`."""
    command = [
        sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0",
        "--certfile", str(files.server), *args,
    ]  # fmt: skip
    shell = f"ulimit -n {SERVER_FDS} && exec " + " ".join(command)
    with tempfile.NamedTemporaryFile() as log:
        process = subprocess.Popen(
            ["sh", "-c", shell], stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
        try:
            found: list[int] = []

            def started() -> bool:
                log.seek(0)
                match = re.search(rb"on wss://127\.0\.0\.1:(\d+)/ws", log.read())
                if match:
                    found.append(int(match[1]))
                return bool(found) or process.poll() is not None

            wait_until(started, 60 * UNIT, what="the TLS server starting")
            assert found, f"the server did not start:\n{log.read().decode(errors='replace')}"
            server = TLSServer(process, found[0], files.context(), log)
            wait_until(_answers(server), 30 * UNIT, what="/health over TLS at start")
            yield server
        finally:
            process.terminate()
            try:
                process.wait(30 * UNIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _answers(server: TLSServer) -> Callable[[], bool]:
    def check() -> bool:
        try:
            server.health(timeout=1)
        except AssertionError:
            return False
        return True

    return check


def ended(sock: socket.socket) -> bool:
    """Whether the server ended `sock` (an end of stream or a reset), without waiting."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


@pytest.fixture
def room_for_the_attack() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the descriptor limit ({hard}) is too low for this attack")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


@pytest.mark.usefixtures("room_for_the_attack")
def test_connections_that_never_start_tls_leave_health_and_sessions_served(
    pki: Pki,  # noqa: F811 - the fixture
) -> None:
    # The deadline is long: only the cap can make room during the test.
    with (
        tls_serve(
            pki, "--max-connections", str(CAP), "--handshake-timeout", f"{300 * UNIT:g}"
        ) as server,
        Neighbour(server, pki) as neighbour,  # type: ignore[arg-type]
        contextlib.ExitStack() as stack,
    ):
        rss_before = server.rss()
        idle = []
        for _ in range(IDLE):
            sock = socket.create_connection((server.host, server.port), timeout=10 * UNIT)
            stack.callback(sock.close)
            idle.append(sock)
        for _ in range(3):
            server.health()
            neighbour.check()
        with EnvClient(server.url, ca_file=pki.ca_file, timeout=10 * UNIT) as env:
            env.reset(seed=0)
            env.step(0)
        neighbour.check()
        # The newest idle connections hold the cap; the older ones were shed, and the
        # server holds no more descriptors than the cap and its headroom.
        wait_until(
            lambda: sum(ended(sock) for sock in idle[: IDLE - CAP]) == IDLE - CAP,
            30 * UNIT,
            what="idle connections beyond the cap shed",
        )
        assert server.fds() <= SERVER_FDS - 64, server.fds()
        assert server.process.poll() is None, server.output()[-3000:]
        growth = server.rss() - rss_before
        assert growth <= 50 * MB, f"server RSS grew by {growth / MB:.0f} MB"


def send_over_tls(server: TLSServer, request: bytes) -> Answer:
    """Send `request` over TLS from a thread (the server may stop reading) and read the answer."""
    with server.tls() as sock:

        def send() -> None:
            with contextlib.suppress(OSError):
                sock.sendall(request)

        # One thread writes while this one reads: an SSL socket allows that.
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            return read_answer(sock, 10 * UNIT)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sender.join(10 * UNIT)


def test_a_huge_head_over_tls_is_answered_431(pki: Pki) -> None:  # noqa: F811 - the fixture
    with tls_serve(pki) as server, Neighbour(server, pki) as neighbour:  # type: ignore[arg-type]
        rss_before = server.rss()
        host = f"127.0.0.1:{server.port}"
        huge = request_bytes("GET", "/health", host, "X-Big: " + "a" * (8 * MB))
        answer = send_over_tls(server, huge)
        assert answer.status == 431, answer
        assert "--max-head-size" in answer.json()["message"], answer
        server.health()
        neighbour.check()
        growth = server.rss() - rss_before
        assert growth <= 16 * MB, f"server RSS grew by {growth / MB:.0f} MB"


def test_a_full_tls_server_answers_503_after_the_handshake(pki: Pki) -> None:  # noqa: F811
    # Four places: three WebSockets (their share) and a kept-alive connection between two
    # requests, none of which may be shed; the next connection is refused at accept, before
    # its TLS handshake, and told why over TLS once that handshake is done.
    with tls_serve(pki, "--max-connections", "4") as server, contextlib.ExitStack() as stack:
        host = f"127.0.0.1:{server.port}"
        for _ in range(3):
            sock = stack.enter_context(server.tls())
            sock.sendall(upgrade_bytes(host))
            assert read_answer(sock, 10 * UNIT).status == 101
        kept = stack.enter_context(server.tls())
        kept.sendall(request_bytes("GET", "/health", host))
        assert read_answer(kept, 10 * UNIT).status == 200
        for _ in range(3):
            with server.tls() as sock:
                sock.sendall(request_bytes("GET", "/health", host))
                answer = read_answer(sock, 10 * UNIT)
            assert answer.status == 503, answer
            assert "--max-connections" in answer.json()["message"], answer
