"""Error replies that echo what the peer sent (issue 18, finding 6): they stay small.

A 1 MiB action, a 900 KB config value, a 900 KB op name, thousands of
unknown config keys: each error reply names the problem with a short repr
of the value, so a reply never grows with the request. Sessions that send
megabyte actions and never read their replies leave the server's memory
bounded. A neighbour steps throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from openenv_ws.protocol import Error, Open, Step, encode

from ..._rawwire import masked, open_session, reply, request
from .conftest import MB, UNIT, HostileServer, Neighbour, assert_contained, hostile_server

BIG = 1_000_000  # items or characters: the frame stays under the 1 MiB limit
SMALL_REPLY = 2_000  # bytes
SESSIONS = 20


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server("--env", "fake") as server:
        yield server


def _big_action_step(rid: int) -> bytes:
    return encode(Step(id=rid, action=[0] * BIG))


CASES: dict[str, tuple[str, Any]] = {
    "action list": ("invalid_action", lambda: _big_action_step(3)),
    "action string map": (
        "invalid_action",
        lambda: encode(Step(id=3, action={"k": "x" * BIG})),
    ),
    "config value": ("bad_config", lambda: encode(Open(id=3, config={"obs_shape": "x" * BIG}))),
    "config keys": (
        "bad_config",
        lambda: encode(Open(id=3, config={f"key{i:06}": 0 for i in range(50_000)})),
    ),
    "op name": (
        "unknown_op",
        lambda: msgpack.packb({"op": "x" * BIG, "id": 3}),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_error_reply_does_not_echo_a_big_value(server: HostileServer, case: str) -> None:
    code, make = CASES[case]
    rss = server.rss()
    with Neighbour(server) as neighbour, server.raw() as ws:
        if code == "invalid_action":
            open_session(ws, {})
        data = make()
        assert 500_000 < len(data) <= 1 << 20
        ws.send_raw(masked(data))
        _, payload = ws.read_frame(10 * UNIT)
        assert len(payload) < SMALL_REPLY, f"a {len(data)}-byte request got {len(payload)} bytes"
        error = msgpack.unpackb(payload)
        assert error["op"] == "error" and error["code"] == code and error["id"] == 3, error
        assert not error["fatal"], error
        # The session goes on.
        if code == "invalid_action":
            assert not isinstance(request(ws, Step(id=4, action=1)), Error)
        assert_contained(server, neighbour, rss_before=rss)


def test_unread_replies_to_megabyte_actions_leave_memory_bounded(server: HostileServer) -> None:
    rss = server.rss()
    frame = masked(_big_action_step(3))
    with Neighbour(server) as neighbour:
        sockets = [server.raw() for _ in range(SESSIONS)]
        try:
            for ws in sockets:
                open_session(ws, {})
            for ws in sockets:  # three each, replies never read
                for _ in range(3):
                    ws.send_raw(frame)
            # A request sent after them is answered: the server read all of them.
            last = sockets[-1]
            for _ in range(3):
                assert reply(last).code == "invalid_action"
            neighbour.check()
            assert_contained(server, neighbour, rss_before=rss, max_growth=50 * MB)
        finally:
            for ws in sockets:
                ws.close()
