"""OpenEnv environments served unchanged, many at once: 64 concurrent sessions in one
server process, the isolation of an environment that is not concurrent, an async
environment that waits without holding anyone up, an MCP environment's tool calls,
and hostile actions beside a healthy session."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest
import requests
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient
from websockets.sync.client import connect

from openenv_ws.client import EnvClient
from openenv_ws.envs.openenv import openenv_plugin
from openenv_ws.errors import OpenEnvError, RemoteEnvError
from openenv_ws.protocol import Error, Result, decode_server_frame
from openenv_ws.server import ServerLimits, ServerThread, create_app
from tests.conftest import UNIT
from tests.envs.openenv_envs import envs
from tests.envs.openenv_envs.conftest import CoreServer, served
from tests.envs.openenv_envs.envs import (
    AsyncEnvironment,
    CounterEnvironment,
    EchoAction,
    EchoEnvironment,
    EchoObservation,
    SoloEnvironment,
    ThreadBoundEnvironment,
    ToolEnvironment,
)
from tests.server.reliability.conftest import wait_until


@pytest.fixture(scope="module")
def counter_server() -> Iterator[ServerThread]:
    with served(CounterEnvironment) as server:  # classes from Environment[...]'s arguments
        yield server


def test_64_concurrent_sessions_each_see_their_own_environment(
    counter_server: ServerThread,
) -> None:
    barrier = threading.Barrier(64, timeout=60 * UNIT)

    def session(n: int) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
        with EnvClient(counter_server.url, timeout=60 * UNIT) as env:
            barrier.wait()  # all 64 open at once
            first = env.reset(seed=n, episode_id=f"ep-{n}")
            results = [env.step({"amount": n % 3 + 1}) for _ in range(3)]
            barrier.wait()
            return first.observation["total"], [r.observation for r in results], env.state()

    with ThreadPoolExecutor(64) as pool:
        outcomes = list(pool.map(session, range(64)))
    for n, (start, observations, state) in enumerate(outcomes):
        step = n % 3 + 1
        assert start == n
        assert [o["total"] for o in observations] == [n + step, n + 2 * step, n + 3 * step]
        assert observations[-1]["history"] == [step, step, step]
        assert state == {"episode_id": f"ep-{n}", "step_count": 3}


def test_actions_are_validated_into_the_model(counter_server: ServerThread) -> None:
    with EnvClient(counter_server.url) as env:
        env.reset(seed=8)
        for bad, field in (
            ({"amount": "three"}, "amount"),
            ({"amount": 1, "extra": True}, "extra"),
            ({"amount": [1]}, "amount"),
        ):
            with pytest.raises(RemoteEnvError) as caught:
                env.step(bad)
            assert caught.value.code == "invalid_action" and field in caught.value.message
        with pytest.raises(RemoteEnvError, match="map of the fields of CountAction"):
            env.step(3)
        end = env.step({"amount": 10})  # the session went on: adding 10 ends the episode
        assert end.observation["total"] == 18 and end.terminated and end.reward == 10.0


def test_an_environment_without_concurrent_sessions_hosts_one_at_a_time() -> None:
    with served(SoloEnvironment) as server:
        with EnvClient(server.url) as first:
            first.reset(seed=1)
            with pytest.raises(RemoteEnvError) as caught:
                EnvClient(server.url)
            assert caught.value.code == "capacity"
            assert "SUPPORTS_CONCURRENT_SESSIONS" in caught.value.message
            other = GenericEnvClient(base_url=server.http_url).sync()
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"), other:
                other.reset()
            # /schema must build an instance to read the spec: not now (it says when).
            busy = requests.get(f"{server.http_url}/schema", timeout=10 * UNIT)
            assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
            assert busy.json()["code"] == "CAPACITY_REACHED"
            built = SoloEnvironment.instances
            assert first.step({"amount": 2}).observation["total"] == 3  # unharmed
        assert SoloEnvironment.instances == built
        schema = requests.get(f"{server.http_url}/schema", timeout=10 * UNIT)
        assert schema.status_code == 200 and schema.json()["action"]["title"] == "CountAction"
        with EnvClient(server.url) as second:  # the first one closed: the next one opens
            assert second.reset(seed=5).observation["total"] == 5


def test_a_thread_bound_environment_lives_on_one_thread() -> None:
    ThreadBoundEnvironment.threads.clear()
    with served(ThreadBoundEnvironment) as server:
        with EnvClient(server.url) as one, EnvClient(server.url) as two:
            for env, seed in ((one, 1), (two, 2)):
                env.reset(seed=seed)
            assert one.step({"amount": 3}).observation["total"] == 4
            assert two.step({"amount": 3}).observation["total"] == 5
            assert one.state()["step_count"] == two.state()["step_count"] == 1
        assert len(ThreadBoundEnvironment.threads) == 1  # built, called and closed there
        assert threading.get_ident() not in ThreadBoundEnvironment.threads


def test_an_async_environment_waiting_holds_up_no_other_session() -> None:
    envs.RELEASE.clear()
    envs.WAITING.clear()
    with (
        served(AsyncEnvironment) as server,
        EnvClient(server.url) as waiting,
        EnvClient(server.url) as healthy,
    ):
        waiting.reset()
        healthy.reset()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(waiting.step, {"wait": True, "message": "late"})
            assert envs.WAITING.wait(30 * UNIT)  # its step is under way, awaiting RELEASE
            for i in range(20):
                result = healthy.step({"message": f"m{i}"})
                assert result.observation["echoed_message"] == f"m{i}"
            assert not pending.done()  # still waiting on RELEASE, which nobody set
            assert healthy.state()["step_count"] == 20
            envs.RELEASE.set()
            late = pending.result(timeout=30 * UNIT)
        assert late.observation["echoed_message"] == "late" and late.reward == 1.0
        assert waiting.state()["step_count"] == 1


@pytest.fixture(scope="module")
def tool_server() -> Iterator[ServerThread]:
    with served(ToolEnvironment, CallToolAction, CallToolObservation) as server:
        yield server


# openenv-core 0.3's MCPEnvironment reads a field FastMCP renamed (its warning, not ours).
@pytest.mark.filterwarnings("ignore:Accessing `Tool.inputSchema` is deprecated")
def test_mcp_tool_calls_through_the_session(tool_server: ServerThread) -> None:
    with EnvClient(tool_server.url) as env:
        assert env.reset().info == {"status": "ready"}
        listed = env.step({"type": "list_tools"})
        assert [t["name"] for t in listed.observation["tools"]] == ["add", "shout"]
        added = env.step({"type": "call_tool", "tool_name": "add", "arguments": {"a": 2, "b": 40}})
        assert added.observation["tool_name"] == "add"
        assert added.observation["result"]["data"] == 42
        assert added.observation["error"] is None
        shouted = env.step({"type": "call_tool", "tool_name": "shout", "arguments": {"text": "hi"}})
        assert shouted.observation["result"]["data"] == "HI"
        missing = env.step({"type": "call_tool", "tool_name": "nope", "arguments": {}})
        assert missing.observation["error"]["error_type"] == "tool_not_found"
        with pytest.raises(RemoteEnvError) as caught:
            env.step({"type": "call_tool", "arguments": {}})
        assert caught.value.code == "invalid_action" and "tool_name" in caught.value.message
        assert env.state()["step_count"] == 4


@pytest.mark.filterwarnings("ignore:Accessing `Tool.inputSchema` is deprecated")
async def test_openenv_mcp_tool_client_calls_tools(tool_server: ServerThread) -> None:
    async with MCPToolClient(base_url=tool_server.http_url) as env:
        await env.reset()
        assert [tool.name for tool in await env.list_tools()] == ["add", "shout"]
        assert await env.call_tool("add", a=20, b=22) == 42
        assert await env.call_tool("shout", text="tools") == "TOOLS"
        with pytest.raises(RuntimeError, match="nope"):
            await env.call_tool("nope")


def test_mcp_tool_call_from_openenv_client_equals_openenv_core(tool_server: ServerThread) -> None:
    call = {"type": "call_tool", "tool_name": "add", "arguments": {"a": 1, "b": 2}}
    data = []
    with CoreServer(ToolEnvironment, CallToolAction, CallToolObservation) as core:
        for url in (tool_server.http_url, core.http_url):
            with GenericEnvClient(base_url=url).sync() as env:
                env.reset()
                result = env.step(call)
                data.append((result.observation, result.reward, result.done))
    assert data[0] == data[1]
    assert data[0][0]["result"]["data"] == 3


def _raw(ws: Any, frame: dict[str, Any]) -> Any:
    ws.send(msgpack.packb(frame))
    reply = ws.recv(timeout=10 * UNIT)
    assert isinstance(reply, bytes)
    return decode_server_frame(reply)


HOSTILE: list[Any] = [
    None,
    True,
    7,
    2.5,
    b"\x00\xff",
    "message",
    [1, 2, 3],
    {},
    {"message": 5},
    {"message": None},
    {"message": ["a"]},
    {"message": {"nested": "x"}},
    {"mesage": "typo"},
    {"message": "ok", "extra": 1},
    {"message": "y" * 700_000},
    {"x" * 200_000: "key"},
    {"message": "ok", "metadata": "not a map"},
]


def test_hostile_actions_beside_a_healthy_session(echo_server: ServerThread) -> None:
    with (
        EnvClient(echo_server.url) as healthy,
        connect(echo_server.url, open_timeout=10 * UNIT, max_size=None) as ws,
    ):
        healthy.reset()
        opened = _raw(ws, {"op": "open", "id": 1, "version": 1, "config": {}, "structured": True})
        assert not isinstance(opened, Error), opened
        assert isinstance(_raw(ws, {"op": "reset", "id": 2}), Result)
        for i, action in enumerate(HOSTILE):
            reply = _raw(ws, {"op": "step", "id": 10 + i, "action": action, "obs": True})
            if isinstance(action, dict) and action.get("message") == "y" * 700_000:
                assert isinstance(reply, Result)  # a long message is a valid one
                assert reply.obs["message_length"] == 700_000
            else:
                assert isinstance(reply, Error), (action, reply)
                assert reply.code in ("invalid_action", "bad_request"), reply
                assert not reply.fatal and len(reply.message) <= 700, reply.message
            echoed = healthy.step({"message": f"ok {i}"})
            assert echoed.observation["echoed_message"] == f"ok {i}"
        good = _raw(ws, {"op": "step", "id": 99, "action": {"message": "fine"}, "obs": True})
        assert isinstance(good, Result) and good.obs["echoed_message"] == "fine"
        assert healthy.state()["step_count"] == len(HOSTILE)


def test_hostile_openenv_messages_beside_a_healthy_session(echo_server: ServerThread) -> None:
    with (
        EnvClient(echo_server.url) as healthy,
        connect(echo_server.url, open_timeout=10 * UNIT) as ws,
    ):
        healthy.reset()

        def send(message: Any) -> dict[str, Any]:
            ws.send(message if isinstance(message, str) else json.dumps(message))
            reply: dict[str, Any] = json.loads(ws.recv(timeout=10 * UNIT))
            return reply

        assert send({"type": "reset", "data": {}})["type"] == "observation"
        for data in ({"message": 5}, {}, [], "text", {"message": "a", "nope": 1}, None):
            reply = send({"type": "step", "data": data})
            assert reply["type"] == "error", (data, reply)
            assert reply["data"]["code"] == "VALIDATION_ERROR", reply
            assert healthy.step({"message": "still"}).observation["message_length"] == 5
        assert send("{not json")["data"]["code"] == "INVALID_JSON"
        ok = send({"type": "step", "data": {"message": "fine"}})
        assert ok["data"]["observation"] == {"echoed_message": "fine", "message_length": 4}


def test_served_environment_is_echo(echo_server: ServerThread) -> None:
    with EnvClient(echo_server.url) as env:
        assert env.spec.observation.name == EchoObservation.__name__
        assert env.spec.action.name == EchoAction.__name__
        assert env.spec.extra["name"] == EchoEnvironment.__name__


def test_an_idle_session_of_a_one_session_environment_is_handed_to_a_newcomer() -> None:
    handover = 0.5 * UNIT
    plugin = openenv_plugin(SoloEnvironment, handover=handover)
    app = create_app(plugin, limits=ServerLimits(max_sessions=8))
    with ServerThread(app) as server, EnvClient(server.url, resume=False) as first:
        first.reset(seed=1)
        first.step({"amount": 1})
        opened: list[EnvClient] = []

        def newcomer_in() -> bool:
            try:
                opened.append(EnvClient(server.url, resume=False))
            except RemoteEnvError as exc:
                assert exc.code == "capacity" and "handed over" in exc.message, exc
                return False
            return True

        wait_until(newcomer_in, 30 * UNIT, what="the newcomer's open", step=0.1)
        with opened[0] as second:
            assert second.reset(seed=5).observation["total"] == 5
            with pytest.raises(OpenEnvError) as caught:
                first.step({"amount": 1})
            assert "handed to another client" in str(caught.value), caught.value
            assert second.step({"amount": 2}).observation["total"] == 7
