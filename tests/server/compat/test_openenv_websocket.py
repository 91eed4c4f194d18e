"""OpenEnv's own WebSocket client (openenv-core 0.3) against this server's ``/ws``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from atari import AtariEnv as NativeAtariEnv
from openenv_ws.protocol import Error, Open, Opened, decode_server_frame, encode
from openenv_ws.server import ServerThread, create_app
from openenv_ws.testing import fake_factory
from tests.conftest import UNIT
from tests.server.compat.openenv_atari import AtariAction, AtariEnv


async def test_openenv_client_plays_100_pong_steps_with_the_native_client_frames(
    pong_server: ServerThread,
) -> None:
    actions = np.random.default_rng(7).integers(0, 6, size=100).tolist()
    with NativeAtariEnv(pong_server.url, game="pong", max_episode_steps=60) as native:
        expected = [native.reset(seed=11)]
        for action in actions[:60]:
            expected.append(native.step(action))
        expected.append(native.reset(seed=12))
        for action in actions[60:]:
            expected.append(native.step(action))
        native_state = native.state()

    async with AtariEnv(base_url=pong_server.http_url) as env:
        got = [await env.reset(seed=11)]
        for action in actions[:60]:
            got.append(await env.step(AtariAction(action_id=action)))
        got.append(await env.reset(seed=12))  # the 60-step episode ended: a new one
        for action in actions[60:]:
            got.append(await env.step(AtariAction(action_id=action)))
        state = await env.state()

    assert len(got) == len(expected) == 102
    for i, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        obs, ref = mine.observation, theirs.observation
        screen = np.asarray(obs.screen, dtype=np.uint8).reshape(obs.screen_shape)
        assert np.array_equal(screen, ref.screen), f"frame {i} differs"
        assert obs.screen_shape == [210, 160, 3]
        assert (mine.reward, mine.done) == (theirs.reward, theirs.done), i
        assert (obs.lives, obs.episode_frame_number, obs.frame_number) == (
            ref.lives,
            ref.episode_frame_number,
            ref.frame_number,
        ), i
        assert obs.legal_actions == [0, 1, 2, 3, 4, 5]
    assert expected[60].done and not expected[59].done  # the first episode's last step
    assert state.step_count == native_state.step_count == 40
    assert state.game_name == "pong" and state.frameskip == 4


async def test_openenv_sync_wrapper_and_generic_client(pong_server: ServerThread) -> None:
    env = GenericEnvClient(base_url=pong_server.http_url)
    async with env:
        first = await env.reset(seed=3, episode_id="mine")
        assert first.observation["screen_shape"] == [210, 160, 3]
        assert len(first.observation["screen"]) == 210 * 160 * 3
        step = await env.step({"action_id": 1})
        assert step.observation["episode_frame_number"] == 4
        assert (await env.state())["episode_id"] == "mine"


def _receive_json(ws: Any) -> dict[str, Any]:
    message = ws.recv(timeout=10 * UNIT)
    assert isinstance(message, str), "OpenEnv's dialect answers in text"
    reply: dict[str, Any] = json.loads(message)
    return reply


def assert_closed_with(ws: Any, code: int) -> None:
    """The server closes `ws` next, with close code `code`."""
    with pytest.raises(ConnectionClosed) as info:
        ws.recv(timeout=10 * UNIT)
    assert info.value.rcvd is not None and info.value.rcvd.code == code


def _exchange(ws: Any, message: Any) -> dict[str, Any]:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return _receive_json(ws)


def test_openenv_errors_carry_openenv_codes_and_the_connection_goes_on(
    fake_compat_server: ServerThread,
) -> None:
    with connect(fake_compat_server.url) as ws:
        reply = _exchange(ws, {"type": "step", "data": {"action_id": 0}})
        assert reply["type"] == "error"
        assert reply["data"]["code"] == "EXECUTION_ERROR"
        assert reply["data"]["protocol_code"] == "not_reset"
        reply = _exchange(ws, {"type": "reset", "data": {"seed": 2}})
        assert reply["type"] == "observation" and reply["data"]["observation"]["screen_shape"] == [
            4,
            4,
        ]
        assert _exchange(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert _exchange(ws, {"type": "mcp"})["data"]["code"] == "UNKNOWN_TYPE"
        assert _exchange(ws, {"type": "state", "extra": 1})["data"]["code"] == "VALIDATION_ERROR"
        reply = _exchange(ws, {"type": "step", "data": {"action_id": 9}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        assert reply["data"]["protocol_code"] == "invalid_action"
        reply = _exchange(ws, {"type": "step", "data": {"direction": "up"}})
        assert (
            reply["data"]["code"] == "VALIDATION_ERROR" and "direction" in reply["data"]["message"]
        )
        reply = _exchange(ws, {"type": "reset", "data": {"seed": "x"}})
        assert reply["data"]["code"] == "VALIDATION_ERROR" and "seed" in reply["data"]["message"]
        reply = _exchange(ws, {"type": "step", "data": {"action_id": 3}})
        assert reply["type"] == "observation" and reply["data"]["reward"] == 3.0
        state = _exchange(ws, {"type": "state"})
        assert state["type"] == "state"
        assert state["data"]["step_count"] == 1 and state["data"]["seed"] == 2
        assert isinstance(state["data"]["episode_id"], str)


def test_openenv_close_ends_the_connection_with_1000_and_no_reply(
    fake_compat_server: ServerThread,
) -> None:
    with connect(fake_compat_server.url) as ws:
        _exchange(ws, {"type": "reset"})
        ws.send(json.dumps({"type": "close"}))
        assert_closed_with(ws, 1000)


def test_a_binary_message_on_an_openenv_connection_is_refused_with_1003(
    fake_compat_server: ServerThread,
) -> None:
    with connect(fake_compat_server.url) as ws:
        _exchange(ws, {"type": "reset"})
        ws.send(encode(Open(id=1)))
        reply = _receive_json(ws)
        assert reply["data"]["code"] == "INVALID_JSON" and "binary" in reply["data"]["message"]
        assert_closed_with(ws, 1003)


@pytest.mark.parametrize(
    "first", ["hello", "{}", '{"type": "open"}', "[1, 2]"], ids=["text", "no-type", "v1-op", "list"]
)
def test_a_first_text_message_that_is_not_openenv_json_is_refused_as_text(
    fake_compat_server: ServerThread, first: str
) -> None:
    with connect(fake_compat_server.url) as ws:
        ws.send(first)
        refused = decode_server_frame(ws.recv(timeout=10 * UNIT))
        assert isinstance(refused, Error) and refused.code == "text_frame"
        assert_closed_with(ws, 1003)


def test_a_text_message_after_a_binary_first_message_is_refused(
    fake_compat_server: ServerThread,
) -> None:
    with connect(fake_compat_server.url) as ws:
        ws.send(encode(Open(id=1)))
        assert isinstance(decode_server_frame(ws.recv(timeout=10 * UNIT)), Opened)
        ws.send(json.dumps({"type": "reset"}))
        refused = decode_server_frame(ws.recv(timeout=10 * UNIT))
        assert isinstance(refused, Error) and refused.code == "text_frame"
        assert_closed_with(ws, 1003)


async def test_openenv_clients_over_capacity_get_capacity_reached(
    fake_compat_server: ServerThread,
) -> None:
    async with GenericEnvClient(base_url=fake_compat_server.http_url) as a:
        await a.reset()
        async with GenericEnvClient(base_url=fake_compat_server.http_url) as b:
            await b.reset()
            third = GenericEnvClient(base_url=fake_compat_server.http_url)
            with pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
                await third.reset()
            await third.close()


def test_a_refused_openenv_config_is_a_factory_error_and_close_1011() -> None:
    app = create_app(fake_factory, openenv_config={"n_actions": -1})
    with ServerThread(app) as server, connect(server.url) as ws:
        reply = _exchange(ws, {"type": "reset"})
        assert reply["data"]["code"] == "FACTORY_ERROR" and "n_actions" in reply["data"]["message"]
        assert_closed_with(ws, 1011)
