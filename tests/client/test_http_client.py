"""HTTPEnvClient against a real uvicorn server: the EnvClient API over the HTTP fallback."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from openenv_ws.client import EnvClient, HTTPEnvClient
from openenv_ws.client.http_fallback import http_base
from openenv_ws.errors import (
    InvalidState,
    OpenEnvError,
    RemoteEnvError,
    RequestTimeout,
    ServerUnavailable,
    SessionClosed,
)
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory
from tests.conftest import UNIT
from tests.server.reliability.proxy import CutProxy


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    limits = ServerLimits(max_sessions=8, http_session_ttl=60.0)
    # A short keep-alive: the client must notice closed idle connections and reopen them.
    app = create_app(fake_factory, limits=limits)
    with ServerThread(app, timeout_keep_alive=0.2 * UNIT) as s:
        yield s


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_the_same_session_as_the_websocket_client(server: ServerThread, encoding: Any) -> None:
    config = {"obs_shape": [3, 5], "episode_length": 4}
    with (
        HTTPEnvClient(server.http_url, config=config, encoding=encoding) as http,
        EnvClient(server.url, config=config) as ws,
    ):
        assert http.spec == ws.spec
        a, b = http.reset(seed=3, episode_id="ep"), ws.reset(seed=3, episode_id="ep")
        np.testing.assert_array_equal(a.observation, b.observation)
        for action in (1, 2, 3, 0):
            a, b = http.step(action), ws.step(action)
            np.testing.assert_array_equal(a.observation, b.observation)
            assert (a.reward, a.terminated, a.truncated, a.done, a.info) == (
                b.reward,
                b.terminated,
                b.truncated,
                b.done,
                b.info,
            )
        assert a.done
        assert http.state() == ws.state()
        assert http.state()["episode_id"] == "ep"
        http.reset()
        assert http.step(np.int64(1), obs=False).observation is None
        snap = http.snapshot()
        http.step(2)
        restored = http.restore(snap)
        assert restored.info == {"step": 1}


def test_errors_are_remote_env_errors_and_the_session_goes_on(server: ServerThread) -> None:
    with HTTPEnvClient(server.http_url) as env:
        with pytest.raises(RemoteEnvError) as info:
            env.step(0)
        assert info.value.code == "not_reset" and not info.value.fatal
        env.reset()
        with pytest.raises(RemoteEnvError) as info:
            env.step(99)
        assert info.value.code == "invalid_action"
        assert env.step(1).reward == 1.0


def test_a_refused_config_is_reported_at_construction(server: ServerThread) -> None:
    with pytest.raises(RemoteEnvError) as info:
        HTTPEnvClient(server.http_url, config={"n_actions": 0})
    assert info.value.code == "bad_config" and "n_actions" in info.value.message


def test_a_fatal_error_closes_the_client(server: ServerThread) -> None:
    env = HTTPEnvClient(server.http_url, config={"fail_at_step": 1})
    env.reset()
    with pytest.raises(RemoteEnvError) as info:
        env.step(0)
    assert info.value.code == "internal" and info.value.fatal
    assert env.closed
    with pytest.raises(SessionClosed, match="internal"):
        env.reset()
    env.close()


def test_close_is_idempotent_and_frees_the_session(server: ServerThread) -> None:
    env = HTTPEnvClient(server.http_url)
    env.reset()
    env.close()
    env.close()
    assert env.closed
    with pytest.raises(InvalidState) as info:
        env.step(0)
    assert info.value.code == "closed"


def test_kept_alive_connections_closed_by_the_server_are_reopened(server: ServerThread) -> None:
    with HTTPEnvClient(server.http_url) as env:
        env.reset()
        sock = env._link._conn._sock
        # Wait until the server has closed the idle connection (its keep-alive is short).
        deadline = time.monotonic() + 20 * UNIT
        while not select.select([sock], [], [], 0.05 * UNIT)[0]:
            assert time.monotonic() < deadline, "the server kept the connection open"
        assert env.step(1).info == {"step": 1}


def test_a_reply_that_does_not_come_in_time_is_a_request_timeout(server: ServerThread) -> None:
    with HTTPEnvClient(server.http_url, config={"step_sleep": 2.0 * UNIT}) as env:
        env.reset()
        with pytest.raises(RequestTimeout):
            env.step(1, timeout=0.2 * UNIT)
        # The late reply is never mistaken for the next one: a fresh connection serves it.
        assert env.state()["step_count"] == 1


def test_nothing_listening_is_server_unavailable() -> None:
    from openenv_ws.server import bind_socket

    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(ServerUnavailable, match="is the server running"):
        HTTPEnvClient(f"http://127.0.0.1:{port}", open_timeout=2 * UNIT)


def test_a_server_without_the_fallback_is_reported_as_such(server: ServerThread) -> None:
    with pytest.raises(ServerUnavailable, match="HTTP 404"):
        HTTPEnvClient(server.http_url + "/elsewhere")


def test_urls_of_every_form_reach_the_same_server() -> None:
    assert http_base("ws://h:1/ws") == ("http", "h", 1, "")
    assert http_base("h:2") == ("http", "h", 2, "")
    assert http_base("https://h/api/") == ("https", "h", 443, "/api")
    assert http_base("wss://h:3/api/ws") == ("https", "h", 3, "/api")
    with pytest.raises(ValueError, match="scheme"):
        http_base("ftp://h")
    with pytest.raises(TypeError, match="url or as base_url"):
        HTTPEnvClient()


# --------------------------------------------------------------------------- OpenEnv's subclass pattern


class StyleResult:
    """What an OpenEnv-style ``_parse_result`` builds (OpenEnv's StepResult shape)."""

    def __init__(self, observation: dict[str, Any], reward: float | None, done: bool) -> None:
        self.observation = observation
        self.reward = reward
        self.done = done


class OpenEnvStyleClient(HTTPEnvClient[Any]):
    """A client written as for OpenEnv's HTTPEnvClient: three hooks, JSON-shaped payloads."""

    def _step_payload(self, action: int) -> dict[str, Any]:
        return {"action_id": action, "game_name": "ignored"}

    def _parse_result(self, payload: dict[str, Any]) -> StyleResult:
        return StyleResult(payload["observation"], payload["reward"], payload["done"])

    def _parse_state(self, payload: dict[str, Any]) -> tuple[str | None, int]:
        return payload["episode_id"], payload["step_count"]


def test_a_subclass_in_openenv_style_works_against_the_fallback(server: ServerThread) -> None:
    config = {"obs_shape": [2, 2], "episode_length": 2, "n_actions": 3}
    with OpenEnvStyleClient(base_url=server.http_url, config=config) as env:
        first = env.reset(seed=1)
        assert isinstance(first, StyleResult)
        assert first.observation["screen_shape"] == [2, 2]
        assert first.observation["legal_actions"] == [0, 1, 2]
        assert len(first.observation["screen"]) == 4
        step = env.step(2)
        assert step.reward == 2.0 and not step.done and step.observation["step"] == 1
        assert env.step(1).done
        assert env.state() == (env.state()[0], 2)
        with pytest.raises(OpenEnvError):
            env.step(1)  # the episode is over
    with OpenEnvStyleClient(server.http_url, config=config) as env:
        env.reset()
        with pytest.raises(RemoteEnvError) as info:
            env.step(7)
        assert info.value.code == "invalid_action"


@pytest.mark.parametrize("cut", ["swallow_next_reply", "drop_next_request"])
@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_a_request_whose_connection_fails_is_sent_again_and_applied_once(
    server: ServerThread, cut: str, encoding: Any
) -> None:
    with CutProxy(server.port) as proxy:
        env = HTTPEnvClient(f"http://127.0.0.1:{proxy.port}", encoding=encoding)
        env.reset(seed=0)
        env.step(1)
        getattr(proxy, cut)()  # the server applies the step but its reply is lost, or never sees it
        result = env.step(2)
        assert proxy.timed_cut.is_set() and proxy.cuts == 1
        assert result.info["step"] == 2 and result.reward == 2.0
        assert env.state()["step_count"] == 2  # applied once
        assert env.step(3).info["step"] == 3
        env.close()


def test_without_retries_a_lost_reply_is_server_unavailable(server: ServerThread) -> None:
    with CutProxy(server.port) as proxy:
        env = HTTPEnvClient(f"http://127.0.0.1:{proxy.port}", retry_timeout=0)
        env.reset(seed=0)
        proxy.swallow_next_reply()
        with pytest.raises(ServerUnavailable, match="is the server running"):
            env.step(1)
        assert env.step(2).info["step"] == 2  # the session went on: the lost step was applied
        env.close()


def test_the_server_answers_a_repeated_request_from_its_last_reply(server: ServerThread) -> None:
    base = f"{server.http_url}/v1/sessions"
    json_headers = {"Content-Type": "application/json", "Accept": "application/json"}
    opened = httpx.post(base, json={"config": {}}, headers=json_headers)
    path = opened.headers["Location"]
    httpx.post(f"{server.http_url}{path}/reset", json={"id": 1}, headers=json_headers)
    first = httpx.post(f"{server.http_url}{path}/step", json={"id": 2, "action": 1})
    again = httpx.post(f"{server.http_url}{path}/step", json={"id": 2, "action": 1})
    assert again.content == first.content and again.json()["info"]["step"] == 1
    # Without an id (curl) the same body is a new request each time.
    for expected in (2, 3):
        reply = httpx.post(f"{server.http_url}{path}/step", json={"action": 1})
        assert reply.json()["info"]["step"] == expected
    httpx.delete(f"{server.http_url}{path}")
