"""Structured spaces and values (SPEC section 22) through real servers and every client.

An environment of this file has a Text action and a Dict observation holding
a string, an integer, a bounded array and a Tuple; its values must reach the
sync, async and HTTP clients as the environment made them. A client that does
not announce ``structured`` in ``open`` (one that predates section 22) is
refused with ``bad_config`` and may open a plain environment on the same
connection. Hostile actions come on the raw wire beside a healthy session.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient
from openenv_ws.environment import Environment, EnvResult, EnvSpec
from openenv_ws.errors import InvalidAction, RemoteEnvError
from openenv_ws.protocol import Error, Open, Opened, Reset, Result, Step
from openenv_ws.server import ServerThread, create_app
from openenv_ws.spaces import (
    ArraySpec,
    DictSpec,
    DiscreteSpec,
    MultiBinarySpec,
    TextSpec,
    TupleSpec,
    space_from_wire,
)
from openenv_ws.testing import fake_factory

from ..._rawwire import RawWS, request
from .values import assert_same_value

SPEC = EnvSpec(
    action=TextSpec(16, 1, "abcdefghijklmnopqrstuvwxyz "),
    observation=DictSpec(
        (
            ("echo", TextSpec(16)),
            ("count", DiscreteSpec(17)),
            ("pos", ArraySpec((2,), "float32", np.array([-1, 0], np.float32), 1.0)),
            ("pair", TupleSpec((DiscreteSpec(3, start=-1), MultiBinarySpec((3,))))),
        )
    ),
    extra={"env": "echo-text"},
)


class EchoText(Environment):
    """Echoes a text action; ends the episode on "stop"."""

    inline = True

    def __init__(self) -> None:
        self._steps = 0

    @property
    def spec(self) -> EnvSpec:
        return SPEC

    def _obs(self, text: str) -> dict[str, Any]:
        n = len(text)
        return {
            "echo": text,
            "count": n,
            "pos": np.array([n / 16, n / 32], np.float32),
            "pair": [n % 3 - 1, np.array([n & 1, n >> 1 & 1, n >> 2 & 1], np.int8)],
        }

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        self._steps = 0
        return EnvResult(self._obs(""))

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        why = SPEC.action.check(action)
        if why is not None:
            raise InvalidAction(f"action is not in the Text space: {why}")
        self._steps += 1
        return EnvResult(self._obs(action), reward=float(len(action)), terminated=action == "stop")

    def state(self) -> dict[str, Any]:
        return {"episode_id": None, "step_count": self._steps}


def factory(config: dict[str, Any]) -> Environment:
    if config.get("plain"):
        return fake_factory({})
    return EchoText()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(factory)) as server:
        yield server


WORDS = ["a", "hello", "so long now", "stop"]


def test_the_sync_client_gets_the_spaces_and_the_values(server: ServerThread) -> None:
    local = EchoText()
    with EnvClient(server.url) as env:
        assert env.spec.observation == SPEC.observation
        assert env.spec.action == SPEC.action
        assert_same_value(env.reset().observation, local.reset().obs)
        for word in WORDS:
            got, want = env.step(word), local.step(word)
            assert_same_value(got.observation, want.obs)
            assert (got.reward, got.terminated) == (want.reward, want.terminated)


def test_the_async_and_http_clients_get_the_same_values(server: ServerThread) -> None:
    local = EchoText()
    want = [local.step(w).obs for w in WORDS]

    async def play() -> list[Any]:
        async with AsyncEnvClient(server.url) as env:
            await env.reset()
            return [(await env.step(w)).observation for w in WORDS]

    for got, expected in zip(asyncio.run(play()), want, strict=True):
        assert_same_value(got, expected)
    with HTTPEnvClient(server.http_url) as env:
        env.reset()
        for word, expected in zip(WORDS, want, strict=True):
            assert_same_value(env.step(word).observation, expected)


def test_a_client_without_structured_values_is_refused_and_may_open_another(
    server: ServerThread,
) -> None:
    with RawWS(server.host, server.port) as ws:
        refused = request(ws, Open(id=1))
        assert isinstance(refused, Error) and refused.code == "bad_config"
        assert not refused.fatal
        assert "structured" in refused.message and "dict" in refused.message
        opened = request(ws, Open(id=2, config={"plain": True}))
        assert isinstance(opened, Opened)
        assert opened.spec["observation"]["type"] == "array"
        assert isinstance(request(ws, Reset(id=3)), Result)
        assert isinstance(request(ws, Step(id=4, action=1)), Result)
    with RawWS(server.host, server.port) as ws:
        opened = request(ws, Open(id=1, structured=True))
        assert isinstance(opened, Opened)
        assert space_from_wire(opened.spec["observation"]) == SPEC.observation


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (3, "a string is needed, got int"),
        ("x" * 17, "17 characters"),
        ("", "0 characters"),
        ("UPPER", "charset"),
        ({"text": "a"}, "a string is needed, got dict"),
        (np.zeros(3, np.uint8), "a string is needed, got ndarray"),
    ],
)
def test_bad_text_actions_are_refused_beside_a_healthy_session(
    server: ServerThread, action: Any, message: str
) -> None:
    with EnvClient(server.url) as healthy, RawWS(server.host, server.port) as ws:
        healthy.reset()
        assert isinstance(request(ws, Open(id=1, structured=True)), Opened)
        assert isinstance(request(ws, Reset(id=2)), Result)
        refused = request(ws, Step(id=3, action=action))
        assert isinstance(refused, Error) and refused.code == "invalid_action"
        assert message in refused.message and not refused.fatal
        assert healthy.step("ok").observation["echo"] == "ok"
        again = request(ws, Step(id=4, action="fine"))
        assert isinstance(again, Result) and again.obs["echo"] == "fine"


def test_a_string_action_to_an_integer_space_is_an_invalid_action(server: ServerThread) -> None:
    with EnvClient(server.url, config={"plain": True}) as env:
        env.reset()
        with pytest.raises(RemoteEnvError, match="is not an integer") as caught:
            env.step("up")
        assert caught.value.code == "invalid_action"
        assert env.step(1).reward == 1.0


def test_a_json_open_over_http_reads_structured_values(server: ServerThread) -> None:
    def post(path: str, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        request = urllib.request.Request(
            f"{server.http_url}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read()), reply.headers.get("Location", "")

    opened, where = post("/v1/sessions", {})
    assert opened["op"] == "opened" and opened["spec"]["observation"]["type"] == "dict"
    post(f"{where}/reset", {})
    result, _ = post(f"{where}/step", {"action": "hi"})
    assert result["obs"]["echo"] == "hi" and result["obs"]["count"] == 2
    assert result["obs"]["pair"][0] == 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        post("/v1/sessions", {"structured": False})
    assert b"structured" in refused.value.read()
