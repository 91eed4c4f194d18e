"""OpenEnv's JSON dialect and the JSON view under attack (issue 35, findings 8 and 9).

OpenEnv's messages are type-checked before anything is looked up: a ``type``
that is a list or an object gets an error in OpenEnv's words (or, as a first
message, protocol v1's refusal of text with its close frame), never a
server traceback and a dropped connection. Every value an error echoes is
cut (a 900 KB ``type``, 60,000 unknown keys, 60,000 unknown action fields
give replies of a few hundred bytes). A JSON body nested 500 deep gets 400
``bad_frame`` naming the depth limit, and the server's log stays quiet. A
neighbour steps throughout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from openenv_ws.wire.framing import OP_CLOSE, OP_TEXT, parse_close

from ..._rawwire import Answer, exchange, request_bytes
from .conftest import UNIT, HostileServer, Neighbour, RawWS, assert_contained, hostile_server

SMALL_REPLY = 2_000  # bytes
BIG = 900_000  # characters: the message stays under the 1 MiB frame limit
KEYS = 60_000


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server("--env", "fake", "--openenv-config", '{"episode_length": 1000}') as server:
        yield server


def _text(ws: RawWS, message: Any) -> None:
    ws.send(json.dumps(message).encode(), opcode=OP_TEXT)


def _answer(ws: RawWS) -> bytes:
    """The next text message; fails naming the close if the server closes instead."""
    opcode, payload = ws.read_frame(10 * UNIT)
    assert opcode != OP_CLOSE, f"the server closed the connection: {parse_close(payload)}"
    assert opcode == OP_TEXT, opcode
    return payload


def _openenv_ws(server: HostileServer) -> RawWS:
    """A raw connection speaking OpenEnv's dialect (its first message a valid reset)."""
    ws = server.raw()
    _text(ws, {"type": "reset", "data": {"seed": 0}})
    assert json.loads(_answer(ws))["type"] == "observation"
    return ws


def _no_traceback(server: HostileServer, before: int) -> None:
    written = server.output()[before:]
    assert "Traceback" not in written and "ERROR" not in written, written[-3000:]


HOSTILE: dict[str, tuple[Any, str]] = {
    "type is a list": ({"type": ["reset"]}, "VALIDATION_ERROR"),
    "type is an object": ({"type": {"reset": 1}}, "VALIDATION_ERROR"),
    "type is 900 KB": ({"type": "A" * BIG}, "UNKNOWN_TYPE"),
    "60,000 unknown keys": (
        {"type": "state", **{f"k{i:06}": 0 for i in range(KEYS)}},
        "VALIDATION_ERROR",
    ),
    "60,000 unknown action fields": (
        {"type": "step", "data": {f"f{i:06}": 0 for i in range(KEYS)}},
        "VALIDATION_ERROR",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_openenv_message_gets_a_short_error_and_the_session_goes_on(
    server: HostileServer, case: str
) -> None:
    message, code = HOSTILE[case]
    rss = server.rss()
    before = len(server.output())
    with Neighbour(server) as neighbour, _openenv_ws(server) as ws:
        for _ in range(5):
            _text(ws, message)
            answer = _answer(ws)
            assert len(answer) < SMALL_REPLY, (case, len(answer), answer[:300])
            reply = json.loads(answer)
            assert reply["type"] == "error" and reply["data"]["code"] == code, reply
        # The connection is still OpenEnv's, and its session still answers.
        _text(ws, {"type": "state"})
        assert json.loads(_answer(ws))["type"] == "state"
        _text(ws, {"type": "close"})
        assert ws.until_close(10 * UNIT)[1] == 1000
        assert_contained(server, neighbour, rss_before=rss)
    _no_traceback(server, before)


@pytest.mark.parametrize("kind", [["reset"], {"reset": 1}, 7, None])
def test_a_first_message_whose_type_is_no_string_is_refused_with_a_close_frame(
    server: HostileServer, kind: Any
) -> None:
    before = len(server.output())
    with Neighbour(server) as neighbour, server.raw() as ws:
        _text(ws, {"type": kind, "data": {}})
        messages, code = ws.until_close(10 * UNIT)
        # Not an OpenEnv message: protocol v1, which refuses text (SPEC section 1).
        assert code == 1003, (code, messages)
        assert all(len(m) < SMALL_REPLY for m in messages), messages
        neighbour.check()
    _no_traceback(server, before)


def _post(server: HostileServer, path: str, body: bytes, *headers: str) -> Answer:
    raw = request_bytes(
        "POST", path, server.host, "Content-Type: application/json", *headers, body=body
    )
    return exchange(server.host, server.port, raw, timeout=10 * UNIT)


def test_openenv_http_step_with_60000_unknown_action_fields_gets_a_short_error(
    server: HostileServer,
) -> None:
    opened = _post(server, "/reset", b"{}")
    assert opened.status == 200, opened
    cookie = opened.headers["set-cookie"].split(";", 1)[0]
    body = json.dumps({"action": {f"f{i:06}": 0 for i in range(KEYS)}}).encode()
    answer = _post(server, "/step", body, f"Cookie: {cookie}")
    assert answer.status == 400 and answer.json()["code"] == "VALIDATION_ERROR", answer
    assert len(answer.body) < SMALL_REPLY, len(answer.body)


def _nested(depth: int) -> bytes:
    return ('{"seed": 0, "options": {"x": ' + "[" * depth + "]" * depth + "}}").encode()


def test_deep_json_gets_400_and_the_log_stays_quiet(server: HostileServer) -> None:
    rss = server.rss()
    before = len(server.output())
    with Neighbour(server) as neighbour:
        opened = _post(server, "/v1/sessions", b'{"config": {}}')
        assert opened.status == 201, opened
        path = opened.headers["location"]
        deep = _nested(500)
        assert len(deep) < 1100
        for route in (path + "/reset", path + "/step", "/v1/sessions"):
            for _ in range(20):
                answer = _post(server, route, deep)
                assert answer.status == 400, (route, answer)
                error = answer.json()
                assert error["code"] == "bad_frame" and "deeper than" in error["message"], error
                assert len(answer.body) < SMALL_REPLY
        assert_contained(server, neighbour, rss_before=rss)
    written = server.output()[before:]
    assert "Traceback" not in written and "RecursionError" not in written, written[-3000:]
    assert len(written) < 2_000, len(written)
