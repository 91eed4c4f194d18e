"""Soak: thousands of connect/open/step/disconnect cycles, half of them abrupt.

A real ``openenv-ws serve`` process. Half the cycles end with ``close``;
the other half kill the socket without a close frame (a TCP reset, or a bare
FIN), so the server must notice, park the session for its grace period and
free it. Afterwards no session is left, and the server's resident memory is
within 10% of where it settled after a warm-up of the same cycles.

``OPENENV_WS_SOAK_CYCLES`` scales the run (default 2,000 cycles).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.protocol import Open, Reset, Result, Step, decode_server_frame, encode

from ..._rawwire import RawWS
from .conftest import UNIT, health, wait_until

CYCLES = int(os.environ.get("OPENENV_WS_SOAK_CYCLES", "2000"))
WARMUP = max(100, CYCLES // 10)
THREADS = 4
GRACE = 0.3
CONFIG = {"obs_shape": [32, 32], "episode_length": 1000}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    cmd = [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--grace", str(GRACE), "--no-web"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
    assert url.startswith("ws://127.0.0.1:"), url
    try:
        yield proc, url, url.replace("ws://", "http://").removesuffix("/ws")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30 * UNIT)


def graceful(url: str, n: int) -> None:
    with EnvClient(url, config=CONFIG, resume=False) as env:
        env.reset(seed=n)
        assert env.step(n % 4).info == {"step": 1}


def abrupt(url: str, n: int) -> None:
    ws = RawWS.to(url, timeout=10 * UNIT)
    ws.send(encode(Open(id=1, config=CONFIG)))
    ws.send(encode(Reset(id=2, seed=n)))
    ws.send(encode(Step(id=3, action=n % 4)))
    for _ in range(3):
        reply = decode_server_frame(ws.read_frame(10 * UNIT)[1])
    assert isinstance(reply, Result) and reply.info == {"step": 1}
    if n % 4 == 1:  # a reset (RST), as a crashed host or a cut cable
        with contextlib.suppress(OSError):
            ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.close()  # else a bare FIN: the socket closed, no close frame


def run_cycles(url: str, first: int, count: int) -> None:
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for n in range(first + k, first + count, THREADS):
                (abrupt if n % 2 else graceful)(url, n)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600 * UNIT)
    assert not errors, errors[:3]


def settle(http: str) -> None:
    wait_until(
        lambda: (h := health(http))["sessions"] == 0 and h["connections"] == 0,
        30 * UNIT,
        what="no session and no connection left",
        step=0.05,
    )


def test_soak_cycles_leave_no_session_and_no_memory_behind(
    server: tuple[subprocess.Popen[str], str, str],
) -> None:
    proc, url, http = server
    run_cycles(url, 0, WARMUP)
    settle(http)
    time.sleep(0.5)
    before = rss_bytes(proc.pid)

    start = time.monotonic()
    run_cycles(url, WARMUP, CYCLES)
    took = time.monotonic() - start
    settle(http)
    time.sleep(0.5)
    after = rss_bytes(proc.pid)

    h = health(http)
    growth = (after - before) / before
    print(
        f"\nsoak: {CYCLES} cycles ({CYCLES // 2} abrupt) in {took:.1f} s after {WARMUP} warm-up; "
        f"sessions opened {h['opened_total']}, now {h['sessions']}; "
        f"server RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB ({growth:+.1%})"
    )
    assert proc.poll() is None
    assert h["opened_total"] == WARMUP + CYCLES
    assert h["sessions"] == 0 and h["parked"] == 0
    # Every abrupt cycle went through parking and expiry, none through a leak.
    metrics = httpx.get(f"{http}/metrics").text
    assert f"openenv_ws_sessions_expired_total {float((WARMUP + CYCLES) // 2)}" in metrics
    assert abs(growth) <= 0.10
