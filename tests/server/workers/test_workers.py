"""``openenv-ws serve --workers N``: sessions spread over processes, /health adds them up."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import LocalServerProvider

from ...conftest import UNIT
from ..test_wire_snapshots import CONFIG, assert_same_steps, play_steps


@pytest.fixture(scope="module")
def two_workers() -> Iterator[LocalServerProvider]:
    with LocalServerProvider(args=["--workers", "2", "--env", "fake", "--no-web"]) as server:
        yield server


def _health(server: LocalServerProvider) -> dict[str, Any]:
    health = server.health(timeout=5 * UNIT)
    assert health is not None
    return health


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout * UNIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_sessions_spread_over_both_workers_and_every_worker_reports_the_totals(
    two_workers: LocalServerProvider,
) -> None:
    with VectorEnvClient(two_workers.url, 24, config={"obs_shape": [2]}) as envs:
        envs.reset(seed=0)
        _, rewards, *_ = envs.step(np.ones(24, np.int64))
        assert rewards.tolist() == [1.0] * 24
        answered_by = set()
        for _ in range(20):
            health = _health(two_workers)
            answered_by.add(health["worker"])
            assert health["sessions_total"] == 24
            per_worker = [w["sessions"] for w in health["workers"]]
            assert len(per_worker) == 2 and all(n > 0 for n in per_worker), per_worker
            assert health["workers"][health["worker"]]["sessions"] == health["sessions"]
            assert len({w["pid"] for w in health["workers"]}) == 2
        assert answered_by == {0, 1}  # both workers answered, with the same totals
    _wait_for(lambda: _health(two_workers)["sessions_total"] == 0, "sessions to close")


def test_a_worker_that_dies_is_replaced(two_workers: LocalServerProvider) -> None:
    before = {w["worker"]: w["pid"] for w in _health(two_workers)["workers"]}
    os.kill(before[1], signal.SIGKILL)

    def replaced() -> bool:
        # A connection the kernel gives the new worker waits until it serves, so
        # under load an answer may be late: that is "not yet", not a failure.
        health = two_workers.health(timeout=1.0)
        if health is None:
            return False
        pids = {w["worker"]: w["pid"] for w in health["workers"]}
        return pids[0] == before[0] and pids[1] not in (0, before[1])

    _wait_for(replaced, "worker 1 to be restarted", timeout=60.0)
    with VectorEnvClient(two_workers.url, 8) as envs:  # both serve again
        envs.reset()
        health = _health(two_workers)
        assert health["sessions_total"] == 8


def test_a_hundred_atari_sessions_on_two_workers() -> None:
    """Many sessions on two workers: every session opens and steps."""
    n = 100
    with LocalServerProvider(
        args=["--workers", "2", "--no-web", "--pool-size", "0"], startup_timeout=60 * UNIT
    ) as server:
        config = {"game": "pong", "obs_type": "ram"}
        with VectorEnvClient(server.url, n, config=config, open_timeout=300 * UNIT) as envs:
            obs, _ = envs.reset()
            assert obs.shape == (n, 128)
            _, _, terms, truncs, infos = envs.step(np.zeros(n, np.int64))
            assert infos["frame_number"].tolist() == [4] * n  # every emulator advanced
            assert not terms.any() and not truncs.any()
            health = _health(server)
            assert health["sessions_total"] == n
            assert all(w["sessions"] > 0 for w in health["workers"])


def test_workers_of_one_server_accept_each_others_snapshots() -> None:
    """A client's sessions land on any worker; all workers share one snapshot key."""
    with LocalServerProvider(
        args=["--workers", "2", "--no-web", "--pool-size", "0"], startup_timeout=60 * UNIT
    ) as server:
        n = 20  # all on one worker: probability 2 ** -19
        config = {**CONFIG, "obs_type": "ram"}
        actions = np.random.default_rng(2).integers(0, 4, 80).tolist()
        with VectorEnvClient(server.url, n, config=config):
            health = server.health()
            assert health is not None and all(w["sessions"] > 0 for w in health["workers"])
        with EnvClient(server.url, config=config) as source:
            source.reset(seed=5)
            play_steps(source, actions[:30])
            snap = source.snapshot()
            want = play_steps(source, actions)
        # New connections land on either worker; every one of them must replay the branch.
        clients = [EnvClient(server.url, config=config) for _ in range(n)]
        try:
            for client in clients:
                client.reset()
                client.restore(snap)
                assert_same_steps(play_steps(client, actions), want)
            health = server.health()
            assert health is not None and all(w["sessions"] > 0 for w in health["workers"])
        finally:
            for client in clients:
                client.close()
