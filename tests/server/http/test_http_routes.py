"""The HTTP fallback routes, socket-free through Starlette's TestClient."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from starlette.testclient import TestClient

from openenv_ws.jsonview import server_frame_from_json
from openenv_ws.protocol import (
    ERRORS,
    Closed,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Result,
    StateReply,
    Step,
    decode_server_frame,
    encode,
)
from openenv_ws.server import ServerLimits, SessionRegistry, create_app
from openenv_ws.server.routes.fallback import HTTP_STATUS, HTTPSessionStore, http_status
from openenv_ws.testing import FakeEnvironment, fake_factory
from tests.conftest import UNIT

MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
SPEC = Path(__file__).resolve().parents[3] / "protocol" / "SPEC.md"


def make_client(**limits: Any) -> TestClient:
    return TestClient(
        create_app(fake_factory, limits=ServerLimits(**limits)), base_url="http://localhost"
    )


@pytest.fixture
def client() -> Iterator[TestClient]:
    with make_client(max_sessions=4) as c:
        yield c


def open_session(client: TestClient, **config: Any) -> str:
    r = client.post("/v1/sessions", json={"config": config})
    assert r.status_code == 201, r.text
    location: str = r.headers["location"]
    assert location == f"/v1/sessions/{r.json()['session_id']}"
    return location


def test_a_json_session_matches_the_in_process_environment(client: TestClient) -> None:
    path = open_session(client, episode_length=3, obs_shape=[2, 3])
    local = FakeEnvironment({"episode_length": 3, "obs_shape": [2, 3]})
    reply = server_frame_from_json(client.post(path + "/reset", json={"seed": 9}).content)
    assert isinstance(reply, Result)
    np.testing.assert_array_equal(reply.obs, local.reset(seed=9).obs)
    for action in (1, 3, 2):
        r = client.post(path + "/step", json={"action": action})
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        reply = server_frame_from_json(r.content)
        want = local.step(action)
        assert isinstance(reply, Result)
        np.testing.assert_array_equal(reply.obs, want.obs)
        assert (reply.reward, reply.terminated, reply.done) == (
            want.reward,
            want.terminated,
            want.done,
        )
    state = client.get(path + "/state").json()
    assert state["op"] == "state" and state["state"]["step_count"] == 3
    r = client.delete(path)
    assert r.status_code == 200 and r.json() == {"op": "closed", "id": 0}


def test_msgpack_bodies_are_the_protocol_frames_byte_for_byte(client: TestClient) -> None:
    r = client.post(
        "/v1/sessions",
        content=encode(Open(id=3, config={})),
        headers=MSGPACK,
    )
    assert r.status_code == 201 and r.headers["content-type"] == "application/msgpack"
    opened = decode_server_frame(r.content)
    assert isinstance(opened, Opened) and opened.id == 3
    path = r.headers["location"]
    r = client.post(path + "/reset", content=encode(Reset(id=4, seed=1)), headers=MSGPACK)
    reply = decode_server_frame(r.content)
    assert isinstance(reply, Result) and reply.id == 4
    local = FakeEnvironment()
    local.reset(seed=1)
    r = client.post(path + "/step", content=encode(Step(id=5, action=2)), headers=MSGPACK)
    assert r.content == encode(Result(id=5, **_result_fields(local.step(2))))
    r = client.post(path + "/state", content=encode(GetState(id=6)), headers=MSGPACK)
    reply = decode_server_frame(r.content)
    assert isinstance(reply, StateReply) and reply.id == 6 and reply.state["step_count"] == 1
    r = client.delete(path, headers={"Accept": "application/msgpack"})
    assert isinstance(decode_server_frame(r.content), Closed)


def _result_fields(r: Any) -> dict[str, Any]:
    return {
        "obs": r.obs,
        "reward": r.reward,
        "terminated": r.terminated,
        "truncated": r.truncated,
        "done": r.done,
        "info": r.info,
    }


def test_accept_chooses_the_reply_format(client: TestClient) -> None:
    path = open_session(client)
    r = client.post(path + "/reset", json={}, headers={"Accept": "application/msgpack"})
    assert r.headers["content-type"] == "application/msgpack"
    assert isinstance(decode_server_frame(r.content), Result)
    r = client.post(
        path + "/step",
        content=msgpack.packb({"op": "step", "id": 1, "action": 0}),
        headers={"Content-Type": "application/msgpack", "Accept": "application/json"},
    )
    assert r.headers["content-type"] == "application/json" and r.json()["op"] == "result"
    assert r.json()["obs"]["$ndarray"] == "uint8"


def error_of(r: Any) -> Error:
    if r.headers["content-type"] == "application/msgpack":
        frame = decode_server_frame(r.content)
    else:
        frame = server_frame_from_json(r.content)
    assert isinstance(frame, Error), frame
    assert r.status_code == http_status(frame.code)
    assert frame.fatal is ERRORS[frame.code].fatal
    return frame


def test_errors_carry_protocol_codes_and_their_statuses(client: TestClient) -> None:
    path = open_session(client, episode_length=1)
    r = client.post(path + "/step", json={"action": 0})
    assert r.status_code == 409 and error_of(r).code == "not_reset"
    client.post(path + "/reset", json={})
    r = client.post(path + "/step", json={"action": 7})
    assert r.status_code == 422 and error_of(r).code == "invalid_action"
    assert "[0, 4)" in error_of(r).message
    r = client.post(path + "/step", json={"action": True})
    assert r.status_code == 400 and error_of(r).code == "bad_request"
    client.post(path + "/step", json={"action": 0})  # the episode ends (length 1)
    r = client.post(path + "/step", json={"action": 0})
    assert r.status_code == 409 and error_of(r).code == "episode_over"
    r = client.post(path + "/reset", json={"op": "step", "action": 1})
    assert (
        r.status_code == 400 and "'step' frame was sent to the 'reset' route" in error_of(r).message
    )
    r = client.post(path + "/snapshot", json={})
    assert r.status_code == 200  # the fake environment supports snapshots
    r = client.post("/v1/sessions", json={"config": {"colour": "red"}})
    assert r.status_code == 422 and error_of(r).code == "bad_config"
    r = client.post("/v1/sessions", json={"version": 9})
    assert r.status_code == 400 and error_of(r).code == "unsupported_version"
    # The session survived every non-fatal error.
    assert client.post(path + "/reset", json={}).status_code == 200


def test_unknown_sessions_are_404_not_open(client: TestClient) -> None:
    r = client.post("/v1/sessions/nope/step", json={"action": 0})
    assert r.status_code == 404
    error = error_of(r)
    assert error.code == "not_open" and "POST /v1/sessions" in error.message


def test_a_fatal_error_ends_the_session(client: TestClient) -> None:
    path = open_session(client, fail_at_step=1)
    client.post(path + "/reset", json={})
    r = client.post(path + "/step", json={"action": 0})
    assert r.status_code == 500 and error_of(r).code == "internal"
    assert client.get("/health").json()["http_sessions"] == 0
    assert error_of(client.post(path + "/reset", json={})).code == "not_open"


def test_a_malformed_body_is_a_fatal_bad_frame(client: TestClient) -> None:
    path = open_session(client)
    r = client.post(path + "/reset", content=b"\xc1", headers=MSGPACK)
    assert r.status_code == 400 and error_of(r).code == "bad_frame"
    assert error_of(client.post(path + "/reset", json={})).code == "not_open"
    r = client.post("/v1/sessions", content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in error_of(r).message


def test_bodies_above_the_frame_limit_are_413() -> None:
    with make_client(max_frame_size=1000) as client:
        path = open_session(client)
        big = encode(Step(id=1, action=list(range(1000, 1400))))
        assert len(big) > 1000
        r = client.post(path + "/step", content=big, headers=MSGPACK)
        assert r.status_code == 413 and error_of(r).code == "too_big"
        # A JSON body may be twice the frame limit (base64 and syntax), not more.
        r = client.post("/v1/sessions", json={"config": {"pad": "x" * 2100}})
        assert r.status_code == 413


def test_capacity_is_429_with_retry_after_and_is_shared_with_websockets() -> None:
    with make_client(max_sessions=2) as client:
        open_session(client)
        open_session(client)
        r = client.post("/v1/sessions", json={})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert error_of(r).code == "capacity"
        with client.websocket_connect("ws://localhost/ws") as ws:
            ws.send_bytes(encode(Open(id=1)))
            refused = decode_server_frame(ws.receive_bytes())
            assert isinstance(refused, Error) and refused.code == "capacity"


def test_every_error_code_has_a_status_and_the_spec_table_matches() -> None:
    assert set(ERRORS) <= set(HTTP_STATUS)
    text = SPEC.read_text(encoding="utf-8")
    start = re.search(r"^## \d+\. HTTP fallback", text, re.M)
    assert start is not None, "SPEC.md has an HTTP fallback section"
    section = text[start.end() :]
    end = re.search(r"^## ", section, re.M)
    section = section[: end.start() if end else None]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", section, re.M))
    assert {code: int(status) for code, status in rows.items()} == HTTP_STATUS


def test_codes_a_later_revision_adds_map_by_their_fatal_flag() -> None:
    assert http_status("some_future_code") == 500


# --------------------------------------------------------------------------- expiry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_store_expires_idle_sessions_in_order_of_last_use() -> None:
    clock = Clock()
    registry = SessionRegistry(ServerLimits(http_session_ttl=10.0))
    store = HTTPSessionStore(fake_factory, registry, clock=clock)
    sessions = []
    for _ in range(3):
        session = store.new_session()
        session.handle(encode(Open(id=1)))
        store.add(session, {})
        sessions.append(session.session_id)
        clock.now += 1.0
    assert store.get(sessions[0]) is not None  # used at 103: now the most recent
    clock.now = 112.5  # sessions[1] (101) and sessions[2] (102) are idle for more than 10 s
    assert store.expire() == 2
    assert len(store) == 1 and store.get(sessions[0]) is not None
    assert len(registry.active) == 1  # the expired sessions' slots are free
    assert store.missing(sessions[1])[0] == "idle_timeout"
    assert store.missing("never-seen")[0] == "not_open"
    assert store.expire() == 0


def test_the_background_sweeper_expires_abandoned_sessions() -> None:
    with make_client(http_session_ttl=0.2 * UNIT) as client:
        path = open_session(client)
        deadline = time.monotonic() + 20 * UNIT
        while client.get("/health").json()["http_sessions"] and time.monotonic() < deadline:
            time.sleep(0.05 * UNIT)
        assert client.get("/health").json()["http_sessions"] == 0
        assert client.get("/health").json()["sessions"] == 0  # the slot is free again
        r = client.post(path + "/reset", json={})
        assert r.status_code == 404 and error_of(r).code == "idle_timeout"
        assert r.json()["id"] is None


def test_a_nonsense_ttl_is_refused_by_the_limits() -> None:
    with pytest.raises(ValueError, match="http_session_ttl must be above 0, got 0"):
        ServerLimits(http_session_ttl=0)
    with pytest.raises(ValueError, match="http_unused_ttl must be above 0, got -1"):
        ServerLimits(http_unused_ttl=-1)


def test_the_store_expires_sessions_no_request_followed_after_the_unused_ttl() -> None:
    clock = Clock()
    registry = SessionRegistry(ServerLimits(http_session_ttl=300.0, http_unused_ttl=5.0))
    store = HTTPSessionStore(fake_factory, registry, clock=clock)
    ids = []
    for _ in range(3):
        session = store.new_session("10.0.0.1")
        session.handle(encode(Open(id=1)))
        store.add(session, {})
        ids.append(session.session_id)
    clock.now += 4.0
    assert store.get(ids[1]) is not None  # used: from now on only the long TTL applies
    clock.now += 1.5  # ids[0] and ids[2] had no request for 5.5 s after their open
    assert store.expire() == 2
    assert len(store) == 1 and len(registry.active) == 1
    assert registry.peers == {"10.0.0.1": 1}  # the expired sessions' share is free again
    code, message = store.missing(ids[0])
    assert code == "idle_timeout" and "after 5 s" in message, message
    clock.now += 200.0
    assert store.expire() == 0 and store.get(ids[1]) is not None


def test_one_address_holds_at_most_its_share_of_the_sessions() -> None:
    with make_client(max_sessions=8, max_sessions_per_peer=3) as client:
        for _ in range(3):
            open_session(client)
        r = client.post("/v1/sessions", json={"config": {}})
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        error = error_of(r)
        assert error.code == "capacity" and "--max-sessions-per-peer" in error.message
        assert "3 of the 3" in error.message, error.message


def test_the_default_share_is_a_quarter_and_at_least_two_vector_sessions() -> None:
    assert ServerLimits().peer_quota == 256
    assert ServerLimits(max_sessions=200).peer_quota == 128  # twice --max-envs (64)
    assert ServerLimits(max_sessions=200, max_envs=16).peer_quota == 50
    assert ServerLimits(max_sessions=2).peer_quota == 2
    assert ServerLimits(max_sessions=200, max_sessions_per_peer=10).peer_quota == 10
