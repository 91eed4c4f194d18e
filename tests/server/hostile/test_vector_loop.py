"""Work that is not small never holds the event loop (issue 35, findings 2 and 5).

A vector session of 64 envs is built, reset and stepped on its session's
worker thread, its engines built a few envs at a time (each construction
holds the GIL), each taking a cold-open turn; over WebSocket and over the
HTTP fallback alike. Atari single sessions whose preprocessing is heavy (a
1024x1024 stack of 16, up to 1,000 no-ops a reset) are served on their worker
thread too. Meanwhile a neighbour session steps Pong and ``/health``
answers: during a 64-env open each neighbour step completes within a
liveness bound far below the old stall (the whole build held the loop for
6-7 s); beside heavy resets the neighbour takes many steps a reset, not one
between two resets held on the loop.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from openenv_ws.protocol import (
    Batch,
    Close,
    Closed,
    Open,
    Opened,
    Reset,
    Step,
    decode_server_frame,
    encode,
)

from ..._rawwire import masked, request
from .conftest import UNIT, HostileServer, Neighbour, RawWS, hostile_server

PONG = {"game": "pong"}
# 64 envs of small observations: the build is what costs (a ROM load per env).
VECTOR = {"game": "pong", "obs_type": "grayscale", "img_height": 84, "img_width": 84}
N = 64
# The heaviest preprocessing the options allow (16 MiB observations, 1,000 no-ops).
HEAVY = {
    "game": "pong",
    "obs_type": "grayscale",
    "img_height": 1024,
    "img_width": 1024,
    "stack_num": 16,
    "noop_max": 1000,
    "frameskip": 1,
}
# Sessions of HEAVY resetting at once (more would share the GIL more).
HEAVY_SESSIONS = 2
# No rests between engine builds (they keep the test short): the loop is free between them.
SERVE = ("--env", "atari", "--cold-open-share", "1")


def _worst_step(neighbour: Neighbour, since: int) -> float:
    return max(neighbour.latencies[since:], default=0.0)


@contextmanager
def _attack(work: Callable[[threading.Event], None], threads: int = 1) -> Iterator[threading.Event]:
    """`work(stop)` on `threads` threads until the block ends; their errors are raised."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work(stop)
        except BaseException as exc:  # noqa: BLE001 - raised in the test below
            errors.append(exc)

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield stop
    finally:
        stop.set()
        for worker in workers:
            worker.join(60 * UNIT)
    assert not errors, errors[0]


def _watch(server: HostileServer, neighbour: Neighbour, done: Callable[[], bool]) -> int:
    """Check the neighbour and /health until `done`; the neighbour's steps meanwhile."""
    since = len(neighbour.latencies)
    deadline = time.monotonic() + 60 * UNIT
    while not done():
        assert time.monotonic() < deadline, "the attack did not finish"
        neighbour.check(within=2)
        server.health(timeout=2)
        time.sleep(0.05 * UNIT)
    return since


def test_a_vector_session_of_64_envs_leaves_the_loop_free() -> None:
    finished = threading.Event()

    def open_reset_step(stop: threading.Event) -> None:
        with server.raw() as ws:
            opened = request(ws, Open(id=1, config=VECTOR, num_envs=N), timeout=60)
            assert isinstance(opened, Opened), opened
            batch = request(ws, Reset(id=2), timeout=60)
            assert isinstance(batch, Batch) and len(batch.env_id) == N, batch
            batch = request(ws, Step(id=3, action=np.zeros(N, np.int64)), timeout=60)
            assert isinstance(batch, Batch) and len(batch.env_id) == N, batch
            assert isinstance(request(ws, Close(id=4)), Closed)
        finished.set()

    with hostile_server(*SERVE) as server, Neighbour(server, PONG) as neighbour:
        with _attack(open_reset_step):
            since = _watch(server, neighbour, finished.is_set)
        worst = _worst_step(neighbour, since)
        # A liveness bound: the whole build on the loop held it for 6-7 s.
        assert worst < 2 * UNIT, f"a neighbour step took {worst:.2f} s during a 64-env open"
        cold = server.health()["cold_opens"]
        # Built a few envs at a time (atari.vector.ENVS_PER_ENGINE), each a paced cold build.
        assert cold["built"] >= N // 8, cold


def _discard_reply(ws: RawWS, buffer: memoryview) -> None:
    """Read the server's next binary frame into `buffer`, unparsed: the client's side of
    a 16 MiB reply costs a few socket reads (the neighbour shares this process)."""
    sock = ws.sock
    while True:
        head = _exactly(sock, 2, buffer)
        opcode, size = head[0] & 0x0F, head[1] & 0x7F
        if size == 126:
            size = int.from_bytes(_exactly(sock, 2, buffer), "big")
        elif size == 127:
            size = int.from_bytes(_exactly(sock, 8, buffer), "big")
        while size:
            got = sock.recv_into(buffer[: min(size, len(buffer))])
            if not got:
                raise EOFError("the server closed the connection")
            size -= got
        if opcode == 0x2:
            return


def _exactly(sock: socket.socket, size: int, buffer: memoryview) -> bytes:
    got = 0
    while got < size:
        n = sock.recv_into(buffer[got:size])
        if not n:
            raise EOFError("the server closed the connection")
        got += n
    return bytes(buffer[:size])


def test_heavy_preprocessing_sessions_leave_the_loop_free() -> None:
    resets = [0]

    def reset_in_a_loop(stop: threading.Event) -> None:
        buffer = memoryview(bytearray(1 << 20))
        with server.raw(timeout=60 * UNIT) as ws:
            opened = request(ws, Open(id=1, config=HEAVY), timeout=60)
            assert isinstance(opened, Opened), opened
            rid = 2
            while not stop.is_set():
                ws.send_raw(masked(encode(Reset(id=rid))))
                _discard_reply(ws, buffer)
                resets[0] += 1
                rid += 1

    with hostile_server("--env", "atari") as server, Neighbour(server, PONG) as neighbour:
        with _attack(reset_in_a_loop, threads=HEAVY_SESSIONS):
            _watch(server, neighbour, lambda: resets[0] >= 2)  # both sessions are resetting
            since, before = len(neighbour.latencies), resets[0]
            _watch(server, neighbour, lambda: resets[0] >= before + 10 * HEAVY_SESSIONS)
            steps, done = len(neighbour.latencies) - since, resets[0] - before
        # Served inline, each reset (100-300 ms) held the loop: the neighbour got a step in
        # between two resets, about one a reset. On the worker threads it steps on while
        # they reset (a step waits for the GIL only): many steps a reset.
        assert steps >= 4 * done, f"the neighbour stepped {steps} times during {done} heavy resets"


def _post(server: HostileServer, path: str, body: dict[str, object]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"{server.http_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/msgpack"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60 * UNIT) as response:
        return response.status, response.read()


def test_a_vector_session_over_http_leaves_the_loop_free() -> None:
    finished = threading.Event()
    statuses: list[int] = []

    def open_and_reset(stop: threading.Event) -> None:
        status, body = _post(server, "/v1/sessions", {"config": VECTOR, "num_envs": N})
        statuses.append(status)
        session_id = _session_id(body)
        status, _ = _post(server, f"/v1/sessions/{session_id}/reset", {})
        statuses.append(status)
        finished.set()

    with hostile_server(*SERVE) as server, Neighbour(server, PONG) as neighbour:
        with _attack(open_and_reset):
            since = _watch(server, neighbour, finished.is_set)
        worst = _worst_step(neighbour, since)
        assert worst < 2 * UNIT, f"a neighbour step took {worst:.2f} s during a 64-env open"
        assert statuses == [201, 200], statuses


def _session_id(body: bytes) -> str:
    opened = decode_server_frame(body)
    assert isinstance(opened, Opened), opened
    return opened.session_id
