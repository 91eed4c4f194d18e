"""Busy polling (``serve --busy-poll``): the loop polls after each message, then sleeps again."""

from __future__ import annotations

import math
import sys
import time

import numpy as np
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.server.transport.fastws import BusyPoll, FastWebSocketProtocol, busy_polling
from openenv_ws.testing import fake_factory
from tests.conftest import UNIT
from tests.test_readme_and_cli import run_cli

WINDOW = 0.05


def _poller(server: ServerThread) -> BusyPoll | None:
    protocol: type[FastWebSocketProtocol] = server.server.config.ws_protocol_class
    return protocol.poller


def _wait_idle(poll: BusyPoll, timeout: float = 5.0 * UNIT) -> None:
    deadline = time.monotonic() + timeout
    while poll.spinning and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not poll.spinning, "the loop kept polling long after the window"


def _play(url: str, steps: int) -> list[tuple[np.ndarray, float, bool]]:
    out = []
    with EnvClient(url, config={"episode_length": 7}) as env:
        env.reset(seed=3)
        for t in range(steps):
            r = env.step(t % 4)
            out.append((r.observation, r.reward, r.done))
            if r.done:
                env.reset()
    return out


def test_polls_after_each_message_and_sleeps_after_the_window() -> None:
    server = ServerThread(create_app(fake_factory, limits=ServerLimits(busy_poll=WINDOW)))
    with server, EnvClient(server.url) as env:
        env.reset(seed=0)
        poll = _poller(server)
        assert poll is not None and poll.window == WINDOW
        _wait_idle(poll)
        rounds = poll.rounds
        assert rounds > 0  # the handshake and the reset were followed by polling
        time.sleep(3 * WINDOW)
        assert poll.rounds == rounds  # asleep: no polling without traffic
        for action in (1, 2):
            # Taken before the request: the window starts when the reply is sent, later.
            sent = time.perf_counter()
            env.step(action)
            _wait_idle(poll)
            # It polled from the reply on, for the whole window, then slept.
            assert time.perf_counter() - sent >= WINDOW
            assert poll.rounds > rounds
            rounds = poll.rounds


def test_results_are_the_same_with_and_without_busy_polling() -> None:
    with ServerThread(create_app(fake_factory, limits=ServerLimits(busy_poll=WINDOW))) as polling:
        with_poll = _play(polling.url, 30)
    with ServerThread(create_app(fake_factory)) as plain:
        without = _play(plain.url, 30)
        assert _poller(plain) is None  # off by default: nothing polls
    assert len(with_poll) == len(without) == 30
    for (obs_a, rew_a, done_a), (obs_b, rew_b, done_b) in zip(with_poll, without, strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert (rew_a, done_a) == (rew_b, done_b)


@pytest.mark.parametrize("window", [-0.001, math.nan, math.inf, 10.5])
def test_a_window_out_of_range_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="busy poll must be between 0 and 10 seconds"):
        busy_polling(window)


def test_zero_is_the_plain_protocol() -> None:
    assert busy_polling(0.0) is FastWebSocketProtocol
    assert busy_polling(0.002).busy_poll == 0.002


def test_serve_rejects_a_negative_busy_poll() -> None:
    done = run_cli("serve", "--env", "fake", "--port", "0", "--busy-poll", "-1", timeout=60)
    assert done.returncode != 0
    assert "--busy-poll must be between 0 and 10 seconds, got -1.0" in done.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="worker processes need fork")
def test_serve_with_busy_poll_serves_sessions_in_every_worker() -> None:
    args = ["--env", "fake", "--workers", "2", "--busy-poll", str(WINDOW)]
    with LocalServerProvider(args=args) as server:
        results = [_play(server.url, 10) for _ in range(4)]
        health = server.health()
    assert health is not None and health["status"] == "ok"
    assert all(len(r) == 10 for r in results)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(results[0], results[1], strict=True))
