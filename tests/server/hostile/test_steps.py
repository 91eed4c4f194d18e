"""A slow or stuck environment call (issue 18, finding 1): it delays only its own session.

An environment that does not declare its calls bounded (here the fake one
with ``step_sleep``) is served on a worker thread of its session under the
per-call deadline ``--step-timeout``: while one session's step sleeps, a
neighbour keeps stepping and ``/health`` answers; a step past the deadline
ends its session with ``step_timeout`` (close 1011); steps within it are
served in order.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from openenv_ws.protocol import Error, GetState, Result, StateReply, decode_server_frame, encode

from ..._rawwire import masked, open_session, reply, step
from .conftest import UNIT, HostileServer, Neighbour, assert_contained, hostile_server

DEADLINE = 3.0  # units


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server("--step-timeout", str(DEADLINE * UNIT)) as server:
        yield server


def test_a_step_past_the_deadline_ends_only_its_session(server: HostileServer) -> None:
    rss = server.rss()
    with Neighbour(server) as neighbour, server.raw() as ws:
        open_session(ws, {"step_sleep": 30 * UNIT})
        ws.send_raw(masked(encode(step(3))))
        # The sleeper's step runs: the neighbour steps and /health answers meanwhile.
        neighbour.check(within=DEADLINE / 3)
        server.health(timeout=DEADLINE / 3)
        messages, code = ws.until_close(10 * DEADLINE * UNIT)
        assert code == 1011, (messages, code)
        assert len(messages) == 1
        error = decode_server_frame(messages[0])
        assert isinstance(error, Error), error
        assert error.code == "step_timeout" and error.fatal and error.id == 3, error
        assert f"{DEADLINE * UNIT:g} s" in error.message and "--step-timeout" in error.message
        assert_contained(server, neighbour, rss_before=rss)
        assert server.health()["sessions"] >= 1  # the abandoned call keeps its slot meanwhile


def test_slow_steps_within_the_deadline_are_served_in_order(server: HostileServer) -> None:
    sleep = DEADLINE * UNIT / 2  # each step within the deadline, longer than the check
    with Neighbour(server) as neighbour, server.raw() as ws:
        open_session(ws, {"step_sleep": sleep, "episode_length": 100})
        for rid in range(10, 13):  # pipelined
            ws.send_raw(masked(encode(step(rid, rid % 4))))
        ws.send_raw(masked(encode(GetState(id=13))))
        for _ in range(3):  # the neighbour steps all along, not only between the sleeps
            neighbour.check(within=DEADLINE / 3)
        replies = [reply(ws, timeout=10 * DEADLINE) for _ in range(4)]
        assert [r.id for r in replies] == list(range(10, 14))
        assert all(isinstance(r, Result) for r in replies[:3]), replies
        assert [r.info["step"] for r in replies[:3]] == [1, 2, 3]
        assert isinstance(replies[3], StateReply) and replies[3].state["step_count"] == 3
        neighbour.check()


def test_the_http_fallback_has_the_same_deadline(server: HostileServer) -> None:
    def post(path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
        req = urllib.request.Request(
            f"{server.http_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=10 * DEADLINE * UNIT) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with Neighbour(server) as neighbour:
        status, opened = post("/v1/sessions", {"config": {"step_sleep": 30 * UNIT}})
        assert status == 201, opened
        path = f"/v1/sessions/{opened['session_id']}"
        assert post(f"{path}/reset", {"seed": 0})[0] == 200
        with ThreadPoolExecutor(1) as pool:
            stepping = pool.submit(post, f"{path}/step", {"action": 1})
            neighbour.check(within=DEADLINE / 3)  # while the HTTP step sleeps
            server.health(timeout=DEADLINE / 3)
            status, error = stepping.result()
        assert status == 504 and error["code"] == "step_timeout", (status, error)
        neighbour.check()
        status, gone = post(f"{path}/step", {"action": 1})
        assert status == 404, (status, gone)
