"""Request heads over the head limit: answered 431 and closed, the server's memory flat.

An attacker sends a request whose head (request line and headers) never ends
in reasonable size: one header line of megabytes, on ``/health`` or on a
WebSocket upgrade. Without a limit the parser keeps all of it (80 MiB were
answered 200 at +120 MB RSS). The server must answer **431** naming
``--max-head-size`` and close, hold no more than the limit and one read per
connection, and serve a head just under the limit as usual.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from collections.abc import Callable

from ..._rawwire import Answer, connect, read_answer, request_bytes, upgrade_bytes
from .conftest import MB, UNIT, HostileServer, Neighbour, assert_contained, hostile_server

#: The server's default head limit (``--max-head-size``).
LIMIT = 1 << 16
#: One header line of this many bytes: far over the limit.
HUGE = 8 * MB


def big_header(size: int) -> str:
    return "X-Big: " + "a" * size


def send_over(server: HostileServer, request: bytes) -> Answer:
    """Send `request` from a thread (the server may stop reading it) and read the answer."""
    with connect(server.host, server.port, timeout=10 * UNIT) as sock:

        def send() -> None:
            # The server may answer and close before it has read the rest.
            with contextlib.suppress(OSError):
                sock.sendall(request)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            answer = read_answer(sock, 10 * UNIT)
            # Closed after the answer: an end of stream or a reset, never another answer.
            sock.settimeout(10 * UNIT)
            try:
                rest = sock.recv(1)
            except ConnectionResetError:
                rest = b""
            assert rest == b"", f"the connection stayed open after the answer: {rest!r}"
        finally:
            with contextlib.suppress(OSError):  # unblocks the sender
                sock.shutdown(socket.SHUT_RDWR)
            sender.join(10 * UNIT)
        return answer


def assert_too_large(answer: Answer) -> None:
    assert answer.status == 431, answer
    assert answer.headers.get("connection") == "close", answer.headers
    body = answer.json()
    assert body["error"] == "head_too_large", body
    assert "--max-head-size" in body["message"], body


def test_a_huge_header_line_is_answered_431_and_memory_stays_flat() -> None:
    with hostile_server() as server, Neighbour(server) as neighbour:
        host = f"127.0.0.1:{server.port}"
        rss_before = server.rss()
        huge = request_bytes("GET", "/health", host, big_header(HUGE))
        assert_too_large(send_over(server, huge))
        # Eight at once, as in the issue (which left 440 MB behind): each holds one read at most.
        answers: list[Answer | BaseException] = []

        def attack() -> None:
            try:
                answers.append(send_over(server, huge))
            except BaseException as exc:  # noqa: BLE001 - reported below
                answers.append(exc)

        attackers = [threading.Thread(target=attack) for _ in range(8)]
        for thread in attackers:
            thread.start()
        for thread in attackers:
            thread.join(30 * UNIT)
        assert len(answers) == len(attackers), answers
        for answer in answers:
            assert isinstance(answer, Answer), answer
            assert_too_large(answer)
        # The same on a WebSocket upgrade: refused before it is accepted.
        assert_too_large(send_over(server, upgrade_bytes(host, big_header(HUGE))))
        assert_contained(server, neighbour, rss_before=rss_before, max_growth=16 * MB)


def padded(build: Callable[..., bytes], size: int) -> bytes:
    """The request `build(*headers)` padded with header lines (each under 4 KiB, as some
    parsers want) to exactly `size` bytes."""
    lines: list[str] = []
    while True:
        short = size - len(build(*lines, "X-Pad: "))
        if short < 0:
            raise ValueError(f"cannot pad to {size} bytes")
        if short <= 4000:
            request = build(*lines, "X-Pad: " + "a" * short)
            assert len(request) == size
            return request
        lines.append(f"X-Pad-{len(lines)}: " + "a" * 4000)


def test_a_head_just_under_the_limit_is_served() -> None:
    with hostile_server() as server, Neighbour(server) as neighbour:
        host = f"127.0.0.1:{server.port}"
        health = functools.partial(request_bytes, "GET", "/health", host, "Connection: close")
        answer = send_over(server, padded(health, LIMIT))
        assert answer.status == 200, answer
        assert answer.json()["status"] == "ok", answer
        # A WebSocket upgrade just under the limit is accepted too.
        with connect(server.host, server.port, timeout=10 * UNIT) as sock:
            sock.sendall(padded(functools.partial(upgrade_bytes, host), LIMIT))
            assert read_answer(sock, 10 * UNIT).status == 101
        # One byte more is too much.
        assert_too_large(send_over(server, padded(health, LIMIT + 1)))
        neighbour.check()
