"""Hostile structured actions (SPEC section 22) on the raw wire, a neighbour stepping.

A step's action that is not a small integer is found by the C step reader
and read by the reference decoder from its bytes alone; malformed ones (too
deep, 0xc1, counts far beyond the bytes, bad UTF-8, keys that are not
strings, extensions that do not belong, a hundred thousand levels) get the
reference decoder's own error, word for word, and the session goes on where
that error is not fatal. Nothing else in the server notices.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from openenv_ws.errors import ProtocolError
from openenv_ws.protocol import Error, Result, decode_client_frame, encode

from ..._rawwire import masked, open_session, reply, request, step
from .conftest import HostileServer, Neighbour, assert_contained, hostile_server

PLAIN = encode(step(5, 1))
ACTION = b"\xa6action\x01"  # the action's key and value in PLAIN

#: Name -> the bytes standing for the action's value.
ACTIONS = {
    "nine levels": b"\x91" * 9 + b"\x01",
    "a hundred thousand levels": b"\x91" * 100_000 + b"\x01",
    "0xc1 in a list": b"\x92\x01\xc1",
    "a map32 of 4 billion entries in 4 bytes": b"\xdf\xff\xff\xff\xff\xa1k\x01",
    "an array16 cut short": b"\xdc\x00\x09\x01\x02",
    "a str32 longer than the frame": b"\x81\xa1k\xdb\x7f\xff\xff\xff",
    "a string that is not UTF-8": b"\x81\xa1k\xa2\xff\xfe",
    "an integer map key": b"\x81\x01\x02",
    "a binary map key": b"\x81\xc4\x01k\x01",
    "an array in shared memory": b"\xd4\x02\x00",
    "an unknown extension inside a map": b"\x81\xa1k\xd4\x09\x00",
    "an array of a dtype that does not exist": b"\x81\xa1a\xc7\x03\x01\xff\x01\x01",
    "nil": b"\xc0",
    "a bool": b"\xc3",
}


def _with_action(value: bytes) -> bytes:
    assert PLAIN.count(ACTION) == 1
    return PLAIN.replace(ACTION, b"\xa6action" + value)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server("--env", "fake") as server:
        yield server


@pytest.mark.parametrize("name", list(ACTIONS))
def test_a_malformed_action_gets_the_reference_decoders_error(
    server: HostileServer, name: str
) -> None:
    data = _with_action(ACTIONS[name])
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(data)
    want = refused.value
    rss = server.rss()
    with Neighbour(server) as neighbour, server.raw() as ws:
        open_session(ws, {})
        ws.send_raw(masked(data))
        got = reply(ws)
        assert isinstance(got, Error), got
        assert (got.code, got.message, got.id) == (want.code, str(want), want.request_id)
        if not got.fatal:
            assert isinstance(request(ws, step(6, 2)), Result)  # the session goes on
        assert_contained(server, neighbour, rss_before=rss)


def test_a_well_formed_map_action_reaches_the_environment(server: HostileServer) -> None:
    with Neighbour(server) as neighbour, server.raw() as ws:
        open_session(ws, {})
        got = request(ws, step(7, {"move": [1, {"deep": "é" * 300}], "n": 2**64 - 1}))
        # The fake environment takes integers: its own refusal, not the decoder's.
        assert isinstance(got, Error) and got.code == "invalid_action" and got.id == 7, got
        assert not got.fatal
        assert isinstance(request(ws, step(8, 3)), Result)
        neighbour.check()
