"""Sessions admitted by what they take, not by their count (SPEC section 9, budgets).

Each test attacks a real ``openenv-ws serve`` with a neighbour stepping: the
largest sessions a client may ask for are admitted until the memory budget is
spent and then refused with ``capacity`` naming it; a vector session asking
for more engine threads than the budget is refused; calls stuck past the step
deadline leave the session count but stay charged, and stop new opens while
too many run; the warm pool keeps only what built and closed cleanly, within
its share of the budget; a client's text never forges a line of the log.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psutil

from atari.vector import vector_threads
from openenv_ws.protocol import Close, Closed, Error, Open, Opened, Reset, Result, Step, encode

from ..._rawwire import masked, reply, request
from ..reliability.conftest import wait_until
from .conftest import MB, UNIT, Neighbour, assert_contained, hostile_server

# A single Atari session of the largest frames and stack the options allow:
# 1024x1024 grayscale, 16 frames stacked (about 37 MiB charged).
HEAVY = {
    "game": "pong",
    "obs_type": "grayscale",
    "img_height": 1024,
    "img_width": 1024,
    "stack_num": 16,
}
GATED = ("--env", "tests.server.hostile._gated:factory", "--pool-size", "0")


def _open(ws: Any, rid: int, config: dict[str, Any], **fields: Any) -> Any:
    return request(ws, Open(id=rid, config=config, **fields), timeout=60)


def test_heavy_sessions_are_admitted_until_the_memory_budget_is_spent() -> None:
    budget = 200 * MB
    with (
        hostile_server(
            "--env", "atari", "--memory-budget", "200M", "--pool-size", "0", "--grace", "0"
        ) as server,
        Neighbour(server, {"game": "pong"}) as neighbour,
    ):
        rss = server.rss()
        sockets = [server.raw() for _ in range(8)]
        try:
            answers = [_open(ws, 1, HEAVY) for ws in sockets]
            opened = [a for a in answers if isinstance(a, Opened)]
            refused = [a for a in answers if isinstance(a, Error)]
            assert 3 <= len(opened) <= 5, answers  # ~37 MiB each, the neighbour's too
            assert refused and all(e.code == "capacity" for e in refused), refused
            assert "memory" in refused[0].message and "--memory-budget" in refused[0].message
            health = server.health()
            assert health["memory"]["budget"] == budget
            assert 0 < health["memory"]["used"] <= budget
            for ws, answer in zip(sockets, answers, strict=True):  # the admitted ones work
                if isinstance(answer, Opened):
                    assert isinstance(request(ws, Reset(id=2, seed=0), timeout=60), Result)
                    assert isinstance(request(ws, Step(id=3, action=0), timeout=60), Result)
            neighbour.check()
            assert_contained(server, neighbour, rss_before=rss, max_growth=budget + 100 * MB)
        finally:
            for ws in sockets:
                ws.close()
        # Their memory is given back with the sessions: heavy opens are admitted again.
        wait_until(
            lambda: server.health()["memory"]["used"] < budget // 4, 10 * UNIT, what="release"
        )
        with server.raw() as ws:
            assert isinstance(_open(ws, 1, HEAVY), Opened)


def test_a_vector_session_over_the_engine_thread_budget_is_refused() -> None:
    with (
        hostile_server("--env", "atari", "--max-engine-threads", "3", "--pool-size", "0") as server,
        Neighbour(server, {"game": "pong"}) as neighbour,
    ):
        threads = psutil.Process(server.pid).num_threads()
        with server.raw() as ws:
            # Two engines of 4 envs: more threads than the 3 allowed.
            config = {"game": "pong", "num_threads": 4}
            asked = vector_threads(config, 8, 4)
            assert asked > 3
            answer = _open(ws, 1, config, num_envs=8, batch_size=4)
            assert isinstance(answer, Error) and answer.code == "capacity", answer
            assert f"{asked} threads" in answer.message, answer.message
            assert "--max-engine-threads" in answer.message
            assert psutil.Process(server.pid).num_threads() <= threads + 2
        with server.raw() as ws:  # within the budget it opens
            answer = _open(ws, 1, {"game": "pong", "num_threads": 2}, num_envs=4, batch_size=4)
            assert isinstance(answer, Opened), answer
            used = server.health()["engine_threads"]["used"]
            assert used == vector_threads({"num_threads": 2}, 4, 4) <= 3
        neighbour.check()


def test_stuck_calls_leave_the_count_stay_charged_and_stop_opens_past_their_bound(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    args = (*GATED, "--step-timeout", str(0.5 * UNIT), "--max-stuck-calls", "2")
    with hostile_server(*args) as server, Neighbour(server) as neighbour:
        for n in range(2):
            with server.raw() as ws:
                assert isinstance(_open(ws, 1, {"step_gate": str(gate)}), Opened)
                assert isinstance(request(ws, Reset(id=2)), Result)
                late = request(ws, Step(id=3, action=0), timeout=30)
                assert isinstance(late, Error) and late.code == "step_timeout", late
            wait_until(lambda n=n: server.health()["stuck_calls"] == n + 1, 10 * UNIT, what="stuck")
        health = server.health()
        assert health["sessions"] == 1  # only the neighbour: stuck calls left the count
        with server.raw() as ws:
            answer = _open(ws, 1, {})
            assert isinstance(answer, Error) and answer.code == "capacity", answer
            assert "--max-stuck-calls" in answer.message
        neighbour.check()
        gate.touch()  # the calls return: their sessions end and opens are admitted again
        wait_until(lambda: server.health()["stuck_calls"] == 0, 10 * UNIT, what="unstuck")
        with server.raw() as ws:
            assert isinstance(_open(ws, 1, {}), Opened)
        neighbour.check()


def test_the_pool_keeps_only_configs_that_built_and_closed_within_its_share(
    tmp_path: Path,
) -> None:
    with (
        hostile_server("--env", "atari", "--memory-budget", "200M", "--pool-size", "1") as server,
        Neighbour(server, {"game": "pong"}) as neighbour,
    ):
        rss = server.rss()
        configs = server.health()["pool"]["configs"]  # the operator's (the default game)
        # A config the build refuses: answered, never kept or retried in the background.
        with server.raw() as ws:
            answer = _open(ws, 1, {"game": "pong", "mode": 99})
            assert isinstance(answer, Error) and answer.code == "bad_config", answer
        # A heavy config that built and closed cleanly, but over the pool's share
        # (200 MB / 8): closed, not kept.
        with server.raw() as ws:
            assert isinstance(_open(ws, 1, HEAVY), Opened)
            assert isinstance(request(ws, Close(id=2)), Closed)
        # A small one that built and closed cleanly: kept.
        small = {"game": "breakout", "obs_type": "ram"}
        with server.raw() as ws:
            assert isinstance(_open(ws, 1, small), Opened)
            assert isinstance(request(ws, Close(id=2)), Closed)
        wait_until(
            lambda: server.health()["pool"]["configs"] == configs + 1, 10 * UNIT, what="kept"
        )
        pool = server.health()["pool"]
        assert pool["failed"] == 0 and pool["bytes"] <= pool["max_bytes"] == 200 * MB // 8
        assert_contained(server, neighbour, rss_before=rss)


def test_a_clients_text_never_forges_a_log_line() -> None:
    forged = "nothing\nERROR openenv_ws.server: forged by a client\r\nWARNING x"
    with hostile_server(*GATED) as server, Neighbour(server) as neighbour:
        with server.raw() as ws:
            assert isinstance(_open(ws, 1, {"raise_text": forged}), Opened)
            assert isinstance(request(ws, Reset(id=2)), Result)
            ws.send_raw(masked(encode(Step(id=3, action=0))))
            failed = reply(ws, timeout=30)
            assert isinstance(failed, Error) and failed.code == "internal", failed
        neighbour.check()
        wait_until(lambda: "forged by a client" in server.output(), 10 * UNIT, what="the log")
        lines = server.output().splitlines()
        assert not [
            line for line in lines if re.match(r"(ERROR openenv_ws.server: forged|WARNING x)", line)
        ]
        assert any("nothing\\nERROR openenv_ws.server: forged" in line for line in lines), lines
