"""OpenEnv env packages (``models.py`` beside ``server/<env>_environment.py``) served from
the class alone, ``openenv-ws serve --env openenv --openenv-app module:Class`` with default
flags: OpenEnv's own clients, ``POST /mcp`` as openenv-core's server answers it, the native
client's Pydantic actions and Gymnasium's checker."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import gymnasium
import httpx
import pytest
from gymnasium.utils.env_checker import check_env
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from openenv_ws.client import EnvClient
from openenv_ws.envs.openenv import load_app
from openenv_ws.errors import EnvConfigError, RemoteEnvError
from openenv_ws.gym import ENV_ID, RemoteEnv
from tests.conftest import UNIT
from tests.envs.openenv_envs.conftest import CoreServer
from tests.envs.openenv_envs.echo_mcp_env.server.echo_environment import EchoEnvironment
from tests.envs.openenv_envs.grid_world_env.models import GridWorldAction, GridWorldObservation

ECHO = "tests.envs.openenv_envs.echo_mcp_env.server.echo_environment:EchoEnvironment"
GRID = "tests.envs.openenv_envs.grid_world_env.server.grid_world_environment:GridWorldEnvironment"
SERVE = [sys.executable, "-m", "openenv_ws", "serve", "--env", "openenv", "--port", "0"]

# openenv-core 0.3's MCPEnvironment reads a field FastMCP renamed (its warning, not ours).
pytestmark = pytest.mark.filterwarnings("ignore:Accessing `Tool.inputSchema` is deprecated")


class Served:
    """``openenv-ws serve --env openenv --openenv-app APP`` (nothing else) as a subprocess."""

    def __init__(self, app: str) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, "--openenv-app", app],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"ws://([\d.]+:\d+)/ws", line)
        if found is None:
            self.proc.terminate()
            _, err = self.proc.communicate(timeout=30 * UNIT)
            raise AssertionError(f"no server: {line!r} {err!r}")
        self.url = found.group(0)
        self.http_url = f"http://{found.group(1)}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30 * UNIT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture(scope="module")
def echo() -> Iterator[Served]:
    server = Served(ECHO)
    yield server
    server.close()


@pytest.fixture(scope="module")
def grid() -> Iterator[Served]:
    server = Served(GRID)
    yield server
    server.close()


def rpc(url: str, method: str, params: dict[str, Any] | None = None, rid: int = 1) -> Any:
    body = {"jsonrpc": "2.0", "method": method, "params": params or {}, "id": rid}
    return httpx.post(url + "/mcp", json=body, timeout=30 * UNIT).json()


def test_the_models_are_found_in_the_package_and_both_missing_ones_named_at_once() -> None:
    grid_app = load_app(GRID)  # step(self, action: Action) -> Observation: models.py decides
    assert (grid_app.action_cls, grid_app.observation_cls) == (
        GridWorldAction,
        GridWorldObservation,
    )
    echo_app = load_app(ECHO)  # an MCPEnvironment whose models.py holds OpenEnv's MCP models
    assert (echo_app.action_cls, echo_app.observation_cls) == (
        CallToolAction,
        CallToolObservation,
    )
    with pytest.raises(EnvConfigError) as caught:
        load_app("openenv.core.env_server.interfaces:Environment")
    said = str(caught.value)
    assert "Action and Observation classes" in said
    assert "--openenv-action" in said and "--openenv-observation" in said


def test_the_command_line_names_both_missing_classes_in_one_failed_start() -> None:
    done = subprocess.run(
        [*SERVE, "--openenv-app", "openenv.core.env_server.interfaces:Environment"],
        capture_output=True,
        text=True,
        timeout=60 * UNIT,
    )
    assert done.returncode != 0
    assert "--openenv-action" in done.stderr and "--openenv-observation" in done.stderr


async def _echo_session(url: str, text: str) -> Any:
    async with MCPToolClient(base_url=url) as env:
        await env.reset()
        return await env.call_tool("echo_with_length", message=text)


def test_echo_serves_openenv_mcp_clients_100_in_turn_then_32_at_once(echo: Served) -> None:
    async def run() -> None:
        for i in range(100):
            assert await _echo_session(echo.http_url, f"m{i}") == {
                "message": f"m{i}",
                "length": len(f"m{i}"),
            }
        texts = [f"concurrent {i}" for i in range(32)]
        got = await asyncio.gather(*(_echo_session(echo.http_url, t) for t in texts))
        assert [g["message"] for g in got] == texts

    asyncio.run(run())


def _grid_session(url: str, move: str) -> Any:
    """One session of OpenEnv's client: reset, one move; the observation after it.

    OpenEnv's client closes without waiting for the server to release the instance
    (the environment is not concurrent): the next session may find it still held a
    moment (``capacity``, fatal to that connection), and then opens again."""
    deadline = time.monotonic() + 10 * UNIT  # a liveness bound
    while True:
        try:
            with GenericEnvClient(base_url=url).sync() as env:
                assert env.reset().observation["x"] == 0
                return env.step({"action": move}).observation
        except Exception as exc:  # only capacity is retried
            if "SUPPORTS_CONCURRENT_SESSIONS" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_grid_world_serves_openenv_clients_100_in_turn_and_one_at_a_time(grid: Served) -> None:
    for i in range(100):
        moved = _grid_session(grid.http_url, "RIGHT" if i % 2 else "DOWN")
        assert (moved["x"], moved["y"]) == ((1, 0) if i % 2 else (0, 1))
    # Not declared concurrent: while one session holds it, another is refused (capacity).
    with EnvClient(grid.url) as held:
        held.reset()
        with pytest.raises(RemoteEnvError) as caught:
            EnvClient(grid.url).close()
        assert caught.value.code == "capacity"
        assert held.step({"action": "RIGHT"}).observation["x"] == 1


def test_the_native_client_sends_a_pydantic_action(echo: Served) -> None:
    with EnvClient(echo.url) as env:
        env.reset()
        call = CallToolAction(tool_name="echo_message", arguments={"message": "typed"})
        result = env.step(call)
        assert result.observation["tool_name"] == "echo_message"
        assert result.observation["result"]["data"] == "typed"


def test_json_action_spaces_sample_and_gymnasiums_checker_passes(
    echo: Served, grid: Served
) -> None:
    with RemoteEnv(grid.url) as env:
        env.reset(seed=1)
        sample = env.action_space.sample()  # {"action": one of the Move enum's values}
        assert sample["action"] in ("UP", "DOWN", "LEFT", "RIGHT")
        assert env.step(sample)[0]["message"] == "moved"
    # check_env makes a second environment beside the first: the concurrent one.
    checked = gymnasium.make(ENV_ID, url=echo.url)
    try:
        assert isinstance(checked.unwrapped, RemoteEnv)
        check_env(checked.unwrapped)  # warnings are errors in this suite: silent too
    finally:
        checked.close()


def _calls(url: str) -> list[Any]:
    """The same JSON-RPC requests, answered by the server at `url`."""
    replies = [
        rpc(url, "tools/call", {"name": "echo_with_length", "arguments": {"message": "hi"}}),
        rpc(url, "tools/call", {"name": "nope", "arguments": {}}, rid=2),
        rpc(url, "tools/call", {"arguments": {}}, rid=3),
        rpc(url, "resources/list", rid="four"),
        rpc(url, "openenv/session/close", {"session_id": "unknown"}, rid=5),
        httpx.post(url + "/mcp", content=b"{not json", timeout=30 * UNIT).json(),
    ]
    created = rpc(url, "openenv/session/create", rid=6)
    session = {"session_id": created["result"]["session_id"]}
    replies.append(
        rpc(url, "tools/call", {"name": "echo_message", "arguments": {"message": "s"}, **session})
    )
    replies.append(rpc(url, "openenv/session/close", session, rid=7)["result"]["closed"])
    replies.append(rpc(url, "tools/list", session, rid=8)["error"]["code"])
    return replies


def test_mcp_answers_as_openenv_core_does(echo: Served) -> None:
    with CoreServer(EchoEnvironment, CallToolAction, CallToolObservation) as core:
        theirs = _calls(core.http_url)
        their_tools = rpc(core.http_url, "tools/list")["result"]["tools"]
    ours = _calls(echo.http_url)
    assert ours == theirs
    our_tools = rpc(echo.http_url, "tools/list")["result"]["tools"]
    assert [t["name"] for t in our_tools] == ["echo_message", "echo_with_length"]
    assert our_tools == [
        {k: t[k] for k in ("name", "description", "input_schema")} for t in their_tools
    ]


def test_openenv_mcp_client_in_production_mode_uses_mcp(echo: Served) -> None:
    async def run() -> tuple[list[str], Any]:
        async with MCPToolClient(base_url=echo.http_url) as env:
            env.use_production_mode = True  # its tools go through POST /mcp
            names = [tool.name for tool in await env.list_tools(use_cache=False)]
            return names, await env.call_tool("echo_message", message="over /mcp")

    assert asyncio.run(run()) == (["echo_message", "echo_with_length"], "over /mcp")


def test_mcp_is_bounded_like_the_other_routes(echo: Served) -> None:
    deep: Any = "x"
    for _ in range(200):  # deeper than the JSON depth limit (SPEC section 9)
        deep = [deep]
    body = {"name": "echo_message", "arguments": {"message": deep}}
    reply = rpc(echo.http_url, "tools/call", body)
    assert reply["error"]["code"] == -32600 and "deeper" in reply["error"]["message"]
    huge = json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 1, "pad": "x" * (2 << 20)})
    refused = httpx.post(echo.http_url + "/mcp", content=huge, timeout=60 * UNIT)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == -32600
    # The server goes on serving.
    call = {"name": "echo_message", "arguments": {"message": "still here"}}
    assert rpc(echo.http_url, "tools/call", call)["result"]["data"] == "still here"
