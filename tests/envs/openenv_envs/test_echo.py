"""The echo environment of openenv-core's documentation, served unchanged: the native
client, OpenEnv's own client over ``/ws`` and its HTTP routes, against openenv-core's
own server hosting the same environment."""

from __future__ import annotations

import json
from typing import Any

import requests
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient as CoreEnvClient
from openenv.core.env_server.types import State
from openenv.core.generic_client import GenericEnvClient
from websockets.sync.client import connect

from openenv_ws.client import EnvClient, HTTPEnvClient
from openenv_ws.server import ServerThread
from openenv_ws.spaces import JsonSpec
from tests.conftest import UNIT
from tests.envs.openenv_envs.conftest import CoreServer
from tests.envs.openenv_envs.envs import EchoAction, EchoObservation

MESSAGES = ["hello", "", "openenv-ws", "ünïcode ✓", "x" * 300]


class EchoEnv(CoreEnvClient[EchoAction, EchoObservation, State]):
    """The echo client, written as openenv-core's documentation shows."""

    def _step_payload(self, action: EchoAction) -> dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EchoObservation]:
        obs = payload.get("observation", {})
        observation = EchoObservation(
            echoed_message=obs.get("echoed_message", ""),
            message_length=obs.get("message_length", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(
            observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> State:
        return State(episode_id=payload.get("episode_id"), step_count=payload.get("step_count", 0))


def test_native_client_gets_typed_structured_results(echo_server: ServerThread) -> None:
    with EnvClient(echo_server.url) as env:
        spec = env.spec
        assert spec.action == JsonSpec(EchoAction.model_json_schema(), "EchoAction")
        assert spec.observation == JsonSpec(EchoObservation.model_json_schema(), "EchoObservation")
        assert spec.extra["state_schema"] == State.model_json_schema()
        assert spec.extra["openenv_metadata"]["name"] == "EchoEnvironment"
        first = env.reset()
        assert first.observation == {
            "reward": 0.0,
            "echoed_message": "Echo environment ready!",
            "message_length": 0,
        }
        for i, message in enumerate(MESSAGES, 1):
            result = env.step({"message": message})
            obs = EchoObservation.model_validate(
                {**result.observation, "done": result.terminated, "metadata": result.info}
            )
            assert obs == EchoObservation(
                echoed_message=message,
                message_length=len(message),
                reward=len(message) * 0.1,
                metadata={"original_message": message, "step": i},
            )
            assert result.reward == len(message) * 0.1 and not result.done
        state = env.state()
        assert state["step_count"] == len(MESSAGES) and isinstance(state["episode_id"], str)


def _ws_replies(url: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with connect(url, open_timeout=10 * UNIT) as ws:
        replies = []
        for message in messages:
            ws.send(json.dumps(message))
            reply = ws.recv(timeout=10 * UNIT)
            assert isinstance(reply, str)
            replies.append(json.loads(reply))
        return replies


def _ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://") + "/ws"


def test_openenv_websocket_replies_equal_openenv_cores(
    echo_server: ServerThread, echo_core: CoreServer
) -> None:
    script: list[dict[str, Any]] = [{"type": "reset", "data": {"seed": 3}}]
    script += [{"type": "step", "data": {"message": m}} for m in MESSAGES]
    script += [{"type": "state"}]
    mine = _ws_replies(echo_server.url, script)
    theirs = _ws_replies(_ws_url(echo_core.http_url), script)
    for reply in (mine[-1], theirs[-1]):  # episode ids are random uuids
        assert reply["type"] == "state" and len(reply["data"].pop("episode_id")) == 36
    assert mine == theirs
    assert mine[1]["data"] == {
        "observation": {"echoed_message": "hello", "message_length": 5},
        "reward": 0.5,
        "done": False,
    }


def test_openenv_clients_play_the_same_episode_on_both_servers(
    echo_server: ServerThread, echo_core: CoreServer
) -> None:
    played = []
    for url in (echo_server.http_url, echo_core.http_url):
        with EchoEnv(base_url=url).sync() as env:
            results = [env.reset()]
            results += [env.step(EchoAction(message=m)) for m in MESSAGES]
            state = env.state()
        assert state.step_count == len(MESSAGES)
        played.append([(r.observation, r.reward, r.done) for r in results])
    assert played[0] == played[1]
    assert played[0][3][0].echoed_message == "openenv-ws"

    generic = []
    for url in (echo_server.http_url, echo_core.http_url):
        with GenericEnvClient(base_url=url).sync() as env:
            generic.append([env.reset().observation, env.step({"message": "hi"}).observation])
    assert (
        generic[0]
        == generic[1]
        == [
            {"echoed_message": "Echo environment ready!", "message_length": 0},
            {"echoed_message": "hi", "message_length": 2},
        ]
    )


def test_http_routes_answer_as_openenv_core(
    echo_server: ServerThread, echo_core: CoreServer
) -> None:
    bodies = []
    for url in (echo_server.http_url, echo_core.http_url):
        with requests.Session() as http:
            got = [
                http.post(f"{url}/reset", json={}, timeout=10 * UNIT),
                http.post(f"{url}/step", json={"action": {"message": "hey"}}, timeout=10 * UNIT),
                http.get(f"{url}/schema", timeout=10 * UNIT),
                http.get(f"{url}/metadata", timeout=10 * UNIT),
            ]
            bad = http.post(f"{url}/step", json={"action": {"message": 5}}, timeout=10 * UNIT)
        assert [r.status_code for r in got] == [200, 200, 200, 200]
        assert bad.status_code == 422 and "message" in bad.text
        bodies.append([r.json() for r in got])
    assert bodies[0] == bodies[1]
    assert bodies[0][1] == {
        "observation": {"echoed_message": "hey", "message_length": 3},
        "reward": 0.30000000000000004,
        "done": False,
    }
    assert bodies[0][2]["action"] == EchoAction.model_json_schema()


class HTTPEcho(HTTPEnvClient[EchoObservation]):
    """openenv-ws's HTTP client with the hooks of the echo client above (OpenEnv's style)."""

    _step_payload = EchoEnv._step_payload
    _parse_result = EchoEnv._parse_result
    _parse_state = EchoEnv._parse_state


def test_openenv_style_http_client_of_openenv_ws(echo_server: ServerThread) -> None:
    with HTTPEcho(echo_server.http_url) as env:
        first = env.reset()
        assert first.observation.echoed_message == "Echo environment ready!"
        for message in MESSAGES:
            result = env.step(EchoAction(message=message))
            assert result.observation == EchoObservation(
                echoed_message=message, message_length=len(message), reward=len(message) * 0.1
            )
            assert result.reward == len(message) * 0.1 and not result.done
        assert env.state().step_count == len(MESSAGES)
