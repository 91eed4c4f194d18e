"""Graceful drain: SIGTERM to a real ``openenv-ws serve`` process with 8 active sessions.

Every request the server received gets its reply (checked against the
in-process environment), then every client sees ``shutting_down`` and close
1001, and the process exits with status 0 in bounded time. A pipelined
client shows it for requests that were still queued behind a running step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from openenv_ws import SessionClosed
from openenv_ws.client import EnvClient
from openenv_ws.protocol import Error, Open, Reset, Result, Step, decode_server_frame, encode
from openenv_ws.testing import FakeEnvironment

from ..._rawwire import RawWS
from .conftest import UNIT, serve, wait_until

SESSIONS = 8
CONFIG = {"episode_length": 1_000_000, "step_sleep": 0.005}
SLOW = {"episode_length": 1_000_000, "step_sleep": 0.3}


@dataclass
class Player:
    """One client thread stepping until the server closes its session."""

    url: str
    seed: int
    steps: int = 0
    mismatches: int = 0
    ended: BaseException | None = None
    started: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        local = FakeEnvironment(CONFIG)
        try:
            with EnvClient(self.url, config=CONFIG, resume=False, timeout=30 * UNIT) as env:
                env.reset(seed=self.seed)
                local.reset(seed=self.seed)
                while True:
                    action = (self.seed + self.steps) % 4
                    result = env.step(action)
                    want = local.step(action)
                    if not np.array_equal(result.observation, want.obs):
                        self.mismatches += 1
                    self.steps += 1
                    if self.steps == 3:
                        self.started.set()
        except BaseException as exc:  # noqa: BLE001 - the end is what the test inspects
            self.ended = exc
            self.started.set()


@pytest.fixture
def server_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    url = line.strip().rsplit(" ", 1)[-1]
    assert url.startswith("ws://127.0.0.1:"), line
    try:
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10 * UNIT)


def test_sigterm_drains_eight_sessions_then_exits_zero(
    server_process: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = server_process
    players = [Player(url, seed) for seed in range(SESSIONS)]
    threads = [threading.Thread(target=p.run) for p in players]
    for t in threads:
        t.start()
    for p in players:
        assert p.started.wait(30 * UNIT) and p.ended is None, p.ended

    # A pipelined client: three slow steps sent at once, the first one running at SIGTERM.
    raw = RawWS.to(url)
    raw.send(encode(Open(id=1, config=SLOW)))
    raw.send(encode(Reset(id=2, seed=9)))
    replies = [decode_server_frame(raw.read_frame(10 * UNIT)[1]) for _ in range(2)]
    for rid in (3, 4, 5):
        raw.send(encode(Step(id=rid, action=rid % 4)))
    time.sleep(0.1 * UNIT)  # the first slow step is running

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    messages, code = raw.until_close(30 * UNIT)
    raw.close()
    for t in threads:
        t.join(30 * UNIT)
    try:
        proc.wait(30 * UNIT)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not exit within 30 s of SIGTERM")
    took = time.monotonic() - sent
    output = proc.communicate()[0]
    print(f"\ndrained {SESSIONS} + 1 sessions and exited in {took:.2f} s")

    assert proc.returncode == 0, output
    # The pipelined client: its three queued steps answered, then the goodbye.
    replies += [decode_server_frame(m) for m in messages]
    results = [r for r in replies if isinstance(r, Result)]
    assert [r.id for r in results] == [2, 3, 4, 5]
    assert [r.info["step"] for r in results] == [0, 1, 2, 3]
    assert isinstance(replies[-1], Error) and replies[-1].code == "shutting_down"
    assert replies[-1].id is None and code == 1001
    # The stepping clients: correct results up to the end, which was a 1001 close for each.
    for p in players:
        assert p.mismatches == 0 and p.steps >= 3
        assert isinstance(p.ended, SessionClosed), repr(p.ended)
        assert p.ended.close_code == 1001 and "shutting down" in str(p.ended)


def test_sigterm_with_no_session_exits_zero_at_once(
    server_process: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = server_process
    with EnvClient(url) as env:
        env.reset()
    proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: proc.poll() is not None, 30 * UNIT, what="exit") >= 0
    assert proc.returncode == 0


def test_stopping_an_embedded_server_drains_its_sessions() -> None:
    """ServerThread.stop drains as SIGTERM does: the open session ends with 1001, at once."""
    with serve() as server:
        env = EnvClient(server.url)
        env.reset()
        server.stop()
        start = time.monotonic()
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        assert info.value.close_code == 1001 and "shutting down" in str(info.value)
        assert time.monotonic() - start < 5 * UNIT  # no resume attempt against a closed port
        env.close()
