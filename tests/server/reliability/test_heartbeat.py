"""Heartbeats free the environment of a client process frozen with SIGSTOP.

A frozen process keeps its TCP connection: the kernel still acknowledges
packets, nothing closes. Only the WebSocket heartbeat can tell: the server's
pings go unanswered and, ``ping_interval + ping_timeout`` later at most, the
connection is dropped and the session freed. A live client of the same kind
(the asyncio client, which answers pings in the background) stays connected
through the same heartbeats however idle it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from openenv_ws.server import ServerThread

from .conftest import UNIT, serve, wait_until

CLIENT = r"""
import asyncio, sys
from openenv_ws.client import AsyncEnvClient

async def main():
    async with AsyncEnvClient(sys.argv[1], resume=False) as env:
        await env.reset(seed=0)
        await env.step(1)
        print(env.session_id, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""

INTERVAL, TIMEOUT = 0.5 * UNIT, 0.5 * UNIT


def spawn(url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    session_id = proc.stdout.readline().strip()
    assert session_id, "the client process did not open its session"
    return proc, session_id


def hosted(server: ServerThread) -> set[str]:
    return {s.session_id for s in server.server.config.app.state.registry.active}


@pytest.fixture
def heartbeat_server() -> Iterator[ServerThread]:
    # No grace period: the moment the connection is dropped is the moment the env is freed.
    with serve(ping_interval=INTERVAL, ping_timeout=TIMEOUT, resume_grace=0) as server:
        yield server


def test_a_frozen_client_process_is_dropped_and_a_live_one_kept(
    heartbeat_server: ServerThread,
) -> None:
    frozen, frozen_id = spawn(heartbeat_server.url)
    live, live_id = spawn(heartbeat_server.url)
    try:
        assert hosted(heartbeat_server) == {frozen_id, live_id}
        os.kill(frozen.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        bound = INTERVAL + TIMEOUT + 2 * UNIT
        detected = wait_until(
            lambda: frozen_id not in hosted(heartbeat_server),
            bound,
            what="frozen client's session freed",
        )
        print(
            f"\nSIGSTOPped client freed after {detected:.2f} s "
            f"(ping interval {INTERVAL:g} s + timeout {TIMEOUT:g} s)"
        )
        # The live client, idle all along, answered every ping: still there.
        time.sleep(max(0.0, 2 * (INTERVAL + TIMEOUT) - (time.monotonic() - stopped)))
        assert hosted(heartbeat_server) == {live_id}
    finally:
        for proc in (frozen, live):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.communicate(timeout=10 * UNIT)
    wait_until(lambda: not hosted(heartbeat_server), 5 * UNIT, what="all sessions freed")


def test_a_frozen_client_keeps_its_session_through_the_grace_period() -> None:
    """With resumption on, the dropped session is parked, then freed when the grace ends."""
    grace = 1.0 * UNIT
    with serve(ping_interval=INTERVAL, ping_timeout=TIMEOUT, resume_grace=grace) as server:
        supervisor = server.server.config.app.state.supervisor
        frozen, session_id = spawn(server.url)
        try:
            os.kill(frozen.pid, signal.SIGSTOP)
            wait_until(lambda: supervisor.store.parked == 1, INTERVAL + TIMEOUT + 2 * UNIT)
            assert session_id in hosted(server)
            wait_until(lambda: not hosted(server), grace + 2 * UNIT, what="grace expiry")
        finally:
            os.kill(frozen.pid, signal.SIGCONT)
            frozen.kill()
            frozen.communicate(timeout=10 * UNIT)
