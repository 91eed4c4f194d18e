"""Cold opens in a loop (issue 18, finding 10): builds take turns, neighbours keep stepping.

Each open whose config the warm pool has not got ready builds its
environment (an ALE ROM load, ~70 ms with the GIL held). A client opening
such sessions in a loop must not keep the process building: cold builds take
at most ``--cold-open-share`` of the time, the opens past it wait their turn
(``/health`` counts them: ``cold_opens.paced``), and beyond
``--cold-open-queue`` waiting opens the next is refused with ``capacity``;
one address may hold a quarter of the queue, so a client from another one
still gets its turn.
"""

from __future__ import annotations

import functools
import socket

import pytest

from openenv_ws.protocol import Close, Error, Open, Opened, encode

from ..._rawwire import masked, reply, request
from .conftest import UNIT, HostileServer, Neighbour, RawWS, assert_contained, hostile_server

OPENS = 8


def _cold(i: int) -> dict[str, int]:
    """A config no other open of the test uses: the pool has none ready."""
    return {"max_num_frames_per_episode": 50_000 + i}


def test_a_loop_of_cold_opens_is_paced_and_the_neighbour_steps() -> None:
    with hostile_server("--env", "atari", "--cold-open-share", "0.1") as server:
        rss = server.rss()
        with Neighbour(server, {"game": "pong"}) as neighbour:
            for i in range(OPENS):
                with server.raw() as ws:
                    opened = request(ws, Open(id=1, config=_cold(i)), timeout=30)
                    assert isinstance(opened, Opened), opened
                    request(ws, Close(id=2))
                neighbour.check()
            cold = server.health()["cold_opens"]
            # Back to back, every open after the first found the previous build's rest.
            assert cold["built"] >= OPENS and cold["paced"] >= OPENS - 1, cold
            assert cold["refused"] == 0, cold
            assert_contained(server, neighbour, rss_before=rss)


def test_opens_beyond_the_waiting_bound_get_capacity() -> None:
    args = ("--env", "atari", "--cold-open-share", "0.05", "--cold-open-queue", "1")
    with hostile_server(*args) as server, Neighbour(server, {"game": "pong"}) as neighbour:
        sockets = [server.raw() for _ in range(4)]
        try:
            # At once: one builds (unless an earlier build's rest is running), one waits,
            # the others are refused.
            for i, ws in enumerate(sockets):
                ws.send_raw(masked(encode(Open(id=1, config=_cold(i)))))
            refused = 0
            for ws in sockets:
                frame = reply(ws, timeout=60)
                if isinstance(frame, Error):
                    assert frame.code == "capacity" and frame.fatal, frame
                    assert "--cold-open-share" in frame.message, frame.message
                    assert ws.until_close(10 * UNIT)[1] == 1013
                    refused += 1
                else:
                    assert isinstance(frame, Opened), frame
            neighbour.check()
            assert refused in (2, 3), refused
            cold = server.health()["cold_opens"]
            assert cold["refused"] == refused and cold["paced"] == 1, cold
        finally:
            for ws in sockets:
                ws.close()


def _from(server: HostileServer, source: str, monkeypatch: pytest.MonkeyPatch) -> RawWS:
    """A raw connection from another loopback address (Linux routes all of 127/8 to lo)."""
    with monkeypatch.context() as patch:
        connect = functools.partial(socket.create_connection, source_address=(source, 0))
        patch.setattr(socket, "create_connection", connect)
        return server.raw()


def test_one_address_cannot_fill_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("--env", "atari", "--cold-open-share", "0.05", "--cold-open-queue", "8")
    with hostile_server(*args) as server, Neighbour(server, {"game": "pong"}) as neighbour:
        # Enough opens at once to fill the whole queue (one building, eight waiting).
        attackers = [_from(server, "127.0.0.2", monkeypatch) for _ in range(10)]
        try:
            for i, ws in enumerate(attackers):
                ws.send_raw(masked(encode(Open(id=1, config=_cold(i)))))
            # Meanwhile a client from another address: it waits its turn and opens.
            with server.raw() as ws:
                opened = request(ws, Open(id=1, config=_cold(100)), timeout=60)
                assert isinstance(opened, Opened), opened
            answers = [reply(ws, timeout=60) for ws in attackers]
            refused = [a for a in answers if isinstance(a, Error)]
            # At most one built at once and two (a quarter of 8) waiting: the rest refused.
            assert len(refused) >= 7, answers
            assert all("from this address" in e.message for e in refused), refused
            neighbour.check()
        finally:
            for ws in attackers:
                ws.close()
