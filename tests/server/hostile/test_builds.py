"""Slow constructors (openenv-core and Gymnasium environments, module:factory ones) are
built off the event loop: on the opening session's worker thread, a few builds at
a time, under the server's per-call deadline. A neighbour session keeps stepping
while a build waits; opens that arrive meanwhile wait their turn; a build past
the deadline is answered ``step_timeout`` and its environment closed when it
comes; one whose client left is closed too.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil

from openenv_ws.client import VectorEnvClient
from openenv_ws.client.vector import OPENS_IN_FLIGHT
from openenv_ws.protocol import Error, Open, Opened, Reset, Result, encode
from openenv_ws.server.session.pacing import MAX_BUILDS_OFF_LOOP

from ..._rawwire import masked, reply, request, step
from ..reliability.conftest import wait_until
from .conftest import UNIT, HostileServer, Neighbour, assert_contained, hostile_server

GATED = ("--env", "tests.server.hostile._gated:factory", "--pool-size", "0")


@contextlib.contextmanager
def _gated(*args: str) -> Iterator[tuple[HostileServer, Neighbour]]:
    with hostile_server(*GATED, *args) as server, Neighbour(server) as neighbour:
        yield server, neighbour


def test_the_neighbour_steps_while_a_constructor_waits(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with _gated() as (server, neighbour), server.raw() as ws:
        rss = server.rss()
        ws.send_raw(masked(encode(Open(id=1, config={"gate": str(gate)}))))
        for _ in range(5):  # the constructor cannot return before the gate exists
            neighbour.check()
        assert server.health()["sessions"] == 1  # the neighbour's; the open is not admitted yet
        gate.touch()
        opened = reply(ws, timeout=30)
        assert isinstance(opened, Opened), opened
        assert isinstance(request(ws, Reset(id=2)), Result)
        result = request(ws, step(3))
        assert isinstance(result, Result) and result.id == 3, result
        assert_contained(server, neighbour, rss_before=rss)


def test_opens_arriving_during_a_build_wait_their_turn(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    args = ("--cold-open-share", "1", "--cold-open-queue", "64")
    with _gated(*args) as (server, neighbour):
        sockets = [server.raw() for _ in range(8)]
        try:
            for ws in sockets:
                ws.send_raw(masked(encode(Open(id=1, config={"gate": str(gate)}))))
            neighbour.check()
            waiting = len(sockets) - MAX_BUILDS_OFF_LOOP
            wait_until(
                lambda: server.health()["cold_opens"]["waiting"] == waiting,
                10 * UNIT,
                what=f"{MAX_BUILDS_OFF_LOOP} builds running, the other opens waiting",
            )
            neighbour.check()
            gate.touch()
            # More constructors at once would fail an open (see _gated.py).
            for ws in sockets:
                opened = reply(ws, timeout=30)
                assert isinstance(opened, Opened), opened
            neighbour.check()
            assert server.health()["cold_opens"]["built"] >= 9
        finally:
            for ws in sockets:
                ws.close()


def test_a_build_past_the_deadline_is_answered_and_its_environment_closed(
    tmp_path: Path,
) -> None:
    gate, closed = tmp_path / "gate", tmp_path / "closed"
    with _gated("--step-timeout", str(1.0 * UNIT)) as (server, neighbour), server.raw() as ws:
        config = {"gate": str(gate), "closed": str(closed)}
        late = request(ws, Open(id=7, config=config), timeout=30)
        assert isinstance(late, Error) and late.code == "step_timeout" and late.fatal, late
        assert late.id == 7 and "building the environment" in late.message, late.message
        assert ws.until_close(10 * UNIT)[1] == 1011
        neighbour.check()
        assert not closed.exists()
        gate.touch()  # the abandoned build returns: nobody takes its environment
        wait_until(closed.exists, 10 * UNIT, what="the late environment closed")
        neighbour.check()
        assert server.health()["sessions"] == 1


def test_a_refused_config_is_answered_and_the_connection_opens_again() -> None:
    with _gated() as (server, neighbour), server.raw() as ws:
        refused = request(ws, Open(id=1, config={"fail": True}))
        assert isinstance(refused, Error) and refused.code == "bad_config", refused
        assert not refused.fatal and "'fail': true" in refused.message, refused.message
        opened = request(ws, Open(id=2, config={}))
        assert isinstance(opened, Opened), opened
        assert isinstance(request(ws, Reset(id=3)), Result)
        neighbour.check()


def test_a_client_leaving_mid_build_leaves_nothing_behind(tmp_path: Path) -> None:
    gate, closed = tmp_path / "gate", tmp_path / "closed"
    with _gated("--grace", "0") as (server, neighbour):  # no parking on disconnect
        with server.raw() as ws:
            config = {"gate": str(gate), "closed": str(closed)}
            ws.send_raw(masked(encode(Open(id=1, config=config))))
            neighbour.check()
        neighbour.check()
        gate.touch()
        wait_until(closed.exists, 10 * UNIT, what="the environment of the departed client closed")
        neighbour.check()
        assert server.health()["sessions"] == 1


def test_failed_builds_leave_no_thread_behind() -> None:
    """Each build runs on its session's worker thread, which ends with the session."""
    with _gated() as (server, neighbour):
        process = psutil.Process(server.pid)
        threads = process.num_threads()
        for _ in range(40):
            with server.raw() as ws:
                refused = request(ws, Open(id=1, config={"fail": True}))
                assert isinstance(refused, Error) and refused.code == "bad_config", refused
        for _ in range(40):  # the HTTP fallback's opens
            body = json.dumps({"config": {"fail": True}}).encode()
            post = urllib.request.Request(
                f"{server.http_url}/v1/sessions",
                data=body,
                headers={"content-type": "application/json"},
                method="POST",
            )
            try:
                urllib.request.urlopen(post, timeout=10 * UNIT).read()
                raise AssertionError("the HTTP open of a refused config succeeded")
            except urllib.error.HTTPError as exc:
                assert exc.code == 422 and b"'fail': true" in exc.read()
        neighbour.check()
        wait_until(
            lambda: process.num_threads() <= threads + 1,
            10 * UNIT,
            what=f"the server back to about {threads} threads",
        )


def test_a_vector_client_keeps_its_opens_under_the_per_address_bound(tmp_path: Path) -> None:
    """100 opens of one client while a build waits: the server lets one address have 64
    opens waiting (a quarter of its queue) and the client never sends more than
    OPENS_IN_FLIGHT unanswered, so none is refused."""
    gate = tmp_path / "gate"
    opened: list[int] = []
    failed: list[BaseException] = []

    def open_all() -> None:
        try:
            with VectorEnvClient(server.url, 100, config={"gate": str(gate)}) as envs:
                opened.append(envs.num_envs)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    with hostile_server(*GATED) as server:
        client = threading.Thread(target=open_all, daemon=True)
        client.start()

        def queued() -> dict[str, int]:
            cold: dict[str, int] = server.health()["cold_opens"]
            return cold

        wait_until(
            lambda: (
                queued()["waiting"] >= OPENS_IN_FLIGHT - MAX_BUILDS_OFF_LOOP
                or queued()["refused"] > 0
            ),
            30 * UNIT,
            what="the client's first opens waiting behind the first build",
        )
        assert (
            queued()["waiting"] == OPENS_IN_FLIGHT - MAX_BUILDS_OFF_LOOP
            and queued()["refused"] == 0
        ), queued()
        gate.touch()
        client.join(60 * UNIT)
        assert not failed, failed
        assert opened == [100]
        assert server.health()["cold_opens"]["refused"] == 0


def test_builds_past_the_deadline_keep_their_slots_until_their_constructors_return(
    tmp_path: Path,
) -> None:
    """Constructors that hang never take more than MAX_BUILDS_OFF_LOOP threads: the next
    open waits (bounded by the cold-open queue) until one returns."""
    gate = tmp_path / "gate"
    marks = [tmp_path / f"closed{i}" for i in range(MAX_BUILDS_OFF_LOOP)]
    with _gated("--step-timeout", str(1.0 * UNIT)) as (server, neighbour):
        for mark in marks:
            with server.raw() as ws:
                config = {"gate": str(gate), "closed": str(mark)}
                late = request(ws, Open(id=1, config=config), timeout=30)
                assert isinstance(late, Error) and late.code == "step_timeout", late
        threads = psutil.Process(server.pid).num_threads()
        with server.raw() as ws:
            ws.send_raw(masked(encode(Open(id=2, config={}))))  # builds at once, given a slot
            wait_until(
                lambda: server.health()["cold_opens"]["waiting"] == 1,
                10 * UNIT,
                what="the open waiting for a build slot",
            )
            neighbour.check()
            assert psutil.Process(server.pid).num_threads() <= threads + 1
            gate.touch()  # the hung constructors return, their environments are closed
            opened = reply(ws, timeout=30)
            assert isinstance(opened, Opened), opened
        for mark in marks:
            wait_until(mark.exists, 10 * UNIT, what=f"{mark.name}: the late environment closed")
        neighbour.check()
