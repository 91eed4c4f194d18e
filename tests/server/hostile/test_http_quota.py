"""Sessions without a connection (issue 35, finding 7): the HTTP fallback cannot fill the server.

An HTTP session holds its slot between requests, with no connection to
watch. One client address flooding ``POST /v1/sessions`` stops at its
per-peer quota (WebSocket and HTTP sessions counted together), and a client
from another address still opens a session; a session nobody sends a
request to after its open expires after the short unused TTL, not the HTTP
session TTL; a stray ``POST /reset`` to an OpenEnv environment that hosts
one session at a time does not lock out the next client for the HTTP TTL.
A neighbour steps throughout.
"""

from __future__ import annotations

import functools
import json
import socket
from typing import Any

import pytest

from openenv_ws.protocol import Error, Open, Opened

from ..._rawwire import Answer, exchange, request, request_bytes
from .conftest import (
    UNIT,
    HostileServer,
    Neighbour,
    RawWS,
    assert_contained,
    hostile_server,
    wait_until,
)

SOLO = "tests.envs.openenv_envs.envs:SoloEnvironment"


def _post(
    server: HostileServer,
    path: str,
    body: Any = None,
    *,
    source: str | None = None,
    cookie: str = "",
) -> Answer:
    headers = ["Content-Type: application/json"]
    if cookie:
        headers.append(f"Cookie: {cookie}")
    data = b"" if body is None else json.dumps(body).encode()
    raw = request_bytes("POST", path, server.host, *headers, body=data)
    return exchange(server.host, server.port, raw, source=source, timeout=10 * UNIT)


def _raw_from(server: HostileServer, source: str, monkeypatch: pytest.MonkeyPatch) -> RawWS:
    """A raw WebSocket connection from another loopback address (Linux routes 127/8 to lo)."""
    with monkeypatch.context() as patch:
        connect = functools.partial(socket.create_connection, source_address=(source, 0))
        patch.setattr(socket, "create_connection", connect)
        return server.raw()


def test_an_http_flood_from_one_address_stops_at_its_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server: 200 sessions. One address may hold a quarter, at least two
    # vector sessions of --max-envs (64): 128, the neighbour (same address) included.
    with hostile_server("--max-sessions", "200") as server, Neighbour(server) as neighbour:
        rss = server.rss()
        answers = [_post(server, "/v1/sessions", {"config": {}}) for _ in range(200)]
        opened = [a for a in answers if a.status == 201]
        refused = [a for a in answers if a.status != 201]
        assert len(opened) == 127, (len(opened), refused[:1])
        assert all(a.status == 429 and a.headers.get("retry-after") == "1" for a in refused)
        message = refused[0].json()["message"]
        assert "--max-sessions-per-peer" in message and "128" in message, message
        assert len(refused[0].body) < 2_000
        health = server.health()
        assert health["sessions"] == 128 and health["http_sessions"] == 127, health
        # The same address over a WebSocket: the quota counts both transports.
        with server.raw() as ws:
            same = request(ws, Open(id=1, config={}))
            assert isinstance(same, Error) and same.code == "capacity", same
            assert "--max-sessions-per-peer" in same.message, same.message
            assert ws.until_close(10 * UNIT)[1] == 1013
        # Another address still gets a session, over a WebSocket and over HTTP.
        ws = _raw_from(server, "127.0.0.2", monkeypatch)
        with ws:
            other = request(ws, Open(id=1, config={}))
            assert isinstance(other, Opened), other
        answer = _post(server, "/v1/sessions", {"config": {}}, source="127.0.0.3")
        assert answer.status == 201, answer
        assert_contained(server, neighbour, rss_before=rss)


def test_an_http_session_nobody_uses_expires_after_the_unused_ttl() -> None:
    unused = 1.0 * UNIT
    args = ("--http-unused-ttl", f"{unused:g}", "--http-session-ttl", "300")
    with hostile_server(*args) as server, Neighbour(server) as neighbour:
        idle = _post(server, "/v1/sessions", {"config": {}})
        used = _post(server, "/v1/sessions", {"config": {}})
        assert idle.status == used.status == 201, (idle, used)
        used_path = used.headers["location"]
        assert _post(server, used_path + "/reset", {"seed": 0}).status == 200
        wait_until(
            lambda: server.health()["http_sessions"] == 1,
            30 * UNIT,
            what="the unused HTTP session to expire",
            step=0.1,
        )
        late = _post(server, idle.headers["location"] + "/reset", {})
        assert late.status == 404 and late.json()["code"] == "idle_timeout", late
        assert f"{unused:g} s" in late.json()["message"], late.json()
        # The session that was used lives on under the HTTP session TTL.
        assert _post(server, used_path + "/step", {"action": 0}).status == 200
        assert server.health()["sessions"] == 2  # the used one and the neighbour
        neighbour.check()


def _openenv_reset(server: HostileServer, *, cookie: str = "") -> tuple[Answer, str]:
    """``POST /reset``; the answer and the session cookie it set (``name=value``)."""
    answer = _post(server, "/reset", {"seed": 1}, cookie=cookie)
    set_cookie = answer.headers.get("set-cookie", "")
    return answer, set_cookie.split(";", 1)[0]


def test_a_stray_openenv_reset_does_not_lock_out_the_next_client() -> None:
    # SoloEnvironment does not declare SUPPORTS_CONCURRENT_SESSIONS: one session at a time.
    args = ("--env", "openenv", "--openenv-app", SOLO)
    with hostile_server(*args) as server:
        stray, stray_cookie = _openenv_reset(server)
        assert stray.status == 200 and stray_cookie, stray
        # Someone else, a moment later: the stray session is busy for a few seconds at most.
        first, _ = _openenv_reset(server)
        assert first.status == 429 and first.json()["code"] == "CAPACITY_REACHED", first
        got: list[Answer] = []

        def next_client_in() -> bool:
            answer, _ = _openenv_reset(server)
            if answer.status == 200:
                got.append(answer)
                return True
            assert answer.status == 429, answer
            return False

        # Well within the HTTP session TTL (300 s): after the handover window (10 s).
        wait_until(next_client_in, 60 * UNIT, what="the next OpenEnv client's reset", step=1.0)
        assert got[0].json()["observation"]["total"] == 1
        assert "handed over" in first.json()["message"], first.json()  # the refusal said when
        # The stray client's session was handed over: its next request says so.
        late = _post(server, "/step", {"action": {"amount": 1}}, cookie=stray_cookie)
        assert late.status == 404 and late.json()["protocol_code"] == "idle_timeout", late
        assert "handed to another client" in late.json()["message"], late.json()
        assert "Traceback" not in server.output()
