"""Slowloris and idle connections: many clients that never finish cannot lock others out.

The attacker opens connections and sends its requests a byte at a time, or
completes WebSocket handshakes and never opens a session. The server must
keep answering ``/health`` and new clients (a 503 naming the limit when it is
full, never a reset), abort requests that miss the handshake deadline, close
connections that open no session within the open deadline, and keep the
neighbour session stepping.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
from collections.abc import Iterator

import pytest

from openenv_ws.client import EnvClient
from openenv_ws.protocol import Error, decode_server_frame

from ..._rawwire import connect, exchange, read_answer, request_bytes, upgrade_bytes
from .conftest import (
    UNIT,
    HostileServer,
    Neighbour,
    assert_contained,
    hostile_server,
    wait_until,
)

#: The descriptor limit a server inherits in the lock-out test: a common default,
#: which the attack's connections exceed.
INHERITED_FD_LIMIT = 1024
TRICKLERS = 1200


@contextlib.contextmanager
def fd_limited_server(soft: int, *args: str) -> Iterator[HostileServer]:
    """A server started with a soft descriptor limit of `soft` (its hard limit unchanged);
    this process gets its own soft limit raised to the hard one for the attack."""
    old, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < TRICKLERS + 200:
        pytest.skip(f"the hard descriptor limit ({hard}) is too low for this attack")
    with contextlib.ExitStack() as stack:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, old), hard))
        try:
            server = stack.enter_context(hostile_server(*args))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        yield server


class Trickle:
    """Connections that send a WebSocket upgrade request one byte at a time and never finish it.

    A thread adds one header byte to every connection still open every
    `period` seconds; :attr:`ended` counts the connections the server
    dropped (a reset or an end of stream).
    """

    def __init__(
        self, server: HostileServer, count: int, *, source: str | None = None, period: float = 0.2
    ) -> None:
        self.server = server
        self.count = count
        self.source = source
        self.period = period
        self.socks: list[socket.socket] = []
        self.ended = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trickle", daemon=True)

    def __enter__(self) -> Trickle:
        head = f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\nX-Slow: ".encode()
        for _ in range(self.count):
            sock = connect(self.server.host, self.server.port, source=self.source, timeout=UNIT)
            sock.setblocking(False)
            with contextlib.suppress(OSError):
                sock.send(head)
            self.socks.append(sock)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for i, sock in enumerate(self.socks):
                if sock.fileno() < 0:
                    continue
                try:
                    if sock.recv(1) == b"":
                        raise ConnectionError
                except BlockingIOError:
                    try:
                        sock.send(b"a")
                        continue
                    except BlockingIOError:
                        continue
                    except OSError:
                        pass
                except OSError:
                    pass
                self.ended += 1
                self.socks[i].close()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10 * UNIT)
        for sock in self.socks:
            sock.close()


def test_trickling_requests_leave_health_and_new_clients_served() -> None:
    """More trickling requests than the server's inherited descriptor limit, from one address."""
    with (
        fd_limited_server(INHERITED_FD_LIMIT) as server,
        Neighbour(server) as neighbour,
    ):
        rss_before = server.rss()
        with Trickle(server, TRICKLERS) as attack:
            for _ in range(3):
                server.health()
                neighbour.check()
            with EnvClient(server.url, timeout=10 * UNIT, open_timeout=10 * UNIT) as env:
                env.reset(seed=0)
                env.step(0)
            # The newcomers took the places of the oldest trickling requests.
            wait_until(lambda: attack.ended > 0, 10 * UNIT, what="trickling requests shed")
        assert_contained(server, neighbour, rss_before=rss_before)


def _hold_websockets(server: HostileServer, source: str) -> tuple[list[socket.socket], str]:
    """Complete WebSocket handshakes from `source` until one is refused; (held, refusal)."""
    held: list[socket.socket] = []
    for _ in range(100):
        sock = connect(server.host, server.port, source=source, timeout=10 * UNIT)
        sock.sendall(upgrade_bytes(f"127.0.0.1:{server.port}"))
        answer = read_answer(sock, 10 * UNIT)
        if answer.status == 101:
            held.append(sock)
            continue
        sock.close()
        assert answer.status == 503, answer
        assert answer.headers.get("retry-after"), answer.headers
        body = answer.json()
        assert body["error"] == "connection_limit", body
        return held, body["message"]
    raise AssertionError("no handshake was refused")


def test_full_caps_answer_503_and_keep_health_reachable() -> None:
    per_peer, total = 8, 40
    health = request_bytes("GET", "/health", "127.0.0.1")
    with (
        hostile_server(
            "--max-connections-per-peer",
            str(per_peer),
            "--max-connections",
            str(total),
            "--handshake-timeout",
            f"{60 * UNIT:g}",
        ) as server,
        Neighbour(server) as neighbour,
        contextlib.ExitStack() as stack,
    ):
        # One address: its WebSocket share of the per-peer cap, then a 503 naming the limit.
        held, refusal = _hold_websockets(server, "127.0.0.2")
        assert len(held) == per_peer - 1, len(held)
        assert "--max-connections-per-peer" in refusal, refusal
        for sock in held:
            stack.callback(sock.close)
        # Its last place taken by a request still sending its body (which is not shed):
        # a newcomer is answered 503 as it connects, and reads the answer whole.
        with connect(server.host, server.port, source="127.0.0.2", timeout=10 * UNIT) as slow:
            slow.sendall(
                b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99\r\n\r\n"
            )
            answer = exchange(
                server.host, server.port, health, source="127.0.0.2", timeout=10 * UNIT
            )
            assert answer.status == 503, answer
            assert "--max-connections-per-peer" in answer.json()["message"], answer
        # Plain requests from that address are answered again (the reserve)...
        wait_until(
            lambda: (
                exchange(
                    server.host, server.port, health, source="127.0.0.2", timeout=10 * UNIT
                ).status
                == 200
            ),
            10 * UNIT,
            what="/health answering from the full address",
        )
        # ... even while trickling requests from it fill its last place: newcomers shed them.
        with Trickle(server, 5, source="127.0.0.2"):
            answer = exchange(
                server.host, server.port, health, source="127.0.0.2", timeout=10 * UNIT
            )
            assert answer.status == 200, answer

        # Other addresses fill the server's WebSocket share; the next handshake gets a 503.
        refusal = ""
        for n in range(3, 20):
            more, refusal = _hold_websockets(server, f"127.0.0.{n}")
            for sock in more:
                stack.callback(sock.close)
            if "--max-connections," in refusal:
                break
        assert "--max-connections," in refusal, refusal
        # Plain HTTP keeps its reserve: /health answers, here and from a full address.
        server.health()
        answer = exchange(server.host, server.port, health, source="127.0.0.2", timeout=10 * UNIT)
        assert answer.status == 200, answer
        neighbour.check()


def test_requests_that_miss_the_handshake_deadline_are_aborted() -> None:
    timeout = 2 * UNIT
    with (
        hostile_server("--handshake-timeout", f"{timeout:g}") as server,
        Neighbour(server) as neighbour,
    ):
        silent = connect(server.host, server.port, timeout=UNIT)
        # A kept-alive connection: one whole request, then the start of another.
        kept = connect(server.host, server.port, timeout=10 * UNIT)
        kept.sendall(request_bytes("GET", "/health", "127.0.0.1"))
        assert read_answer(kept, 10 * UNIT).status == 200
        kept.sendall(b"GET /health HTTP/1.1\r\nHo")
        with silent, kept, Trickle(server, 50, period=0.1) as attack:
            wait_until(
                lambda: attack.ended == attack.count,
                timeout + 10 * UNIT,
                what="the server aborting every trickling request",
            )
            for sock in (silent, kept):
                sock.settimeout(timeout + 10 * UNIT)
                with contextlib.suppress(ConnectionResetError):
                    assert sock.recv(1) == b""
        server.health()
        neighbour.check()


def test_connections_that_open_no_session_are_closed_at_the_open_deadline() -> None:
    timeout = 1 * UNIT
    with (
        hostile_server("--open-timeout", f"{timeout:g}") as server,
        Neighbour(server) as neighbour,
    ):
        idle = [server.raw() for _ in range(20)]
        for ws in idle:
            with ws:
                messages, code = ws.until_close(timeout + 10 * UNIT)
                assert code == 1001, (messages, code)
                error = decode_server_frame(messages[-1])
                assert isinstance(error, Error), error
                assert error.code == "idle_timeout", error
                assert "open timeout" in error.message, error.message
        # The neighbour opened its session at once: the deadline does not touch it.
        neighbour.check()
        server.health()
