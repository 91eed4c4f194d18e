"""Indexed colour frames over real sockets (SPEC section 18): what the server sends,
and that every client hands the user the same RGB arrays as a full-colour session."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from atari import AtariEnvironment, atari_factory
from atari.palettes import palette_of
from openenv_ws import ProtocolError
from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient
from openenv_ws.client._core import ClientCore
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.palette import NATIVE, expanded
from openenv_ws.protocol import Open, Opened, Reset, Result, Step, decode_server_frame, encode
from openenv_ws.server import ServerThread

from ...conftest import UNIT
from ...server.reliability.conftest import serve
from ...server.reliability.proxy import CutProxy

ACTIONS = [(5 * t + 1) % 4 for t in range(120)]  # every game here has 4 actions or more


def raw_session(url: str, config: dict[str, Any], **fields: Any) -> tuple[BlockingWebSocket, Any]:
    """A protocol v1 session opened by hand (no shared region: arrays travel inline)."""
    ws = BlockingWebSocket(url, open_timeout=5 * UNIT)
    ws.send(encode(Open(id=1, config=config, **fields)))
    return ws, ws.recv(decode_server_frame, timeout=5 * UNIT)


def ask(ws: BlockingWebSocket, frame: Any) -> Any:
    ws.send(encode(frame))
    return ws.recv(decode_server_frame, timeout=5 * UNIT)


@pytest.mark.parametrize("game", ["pong", "keystone_kapers"])  # NTSC and PAL
def test_the_server_sends_colour_codes_and_the_palette_when_asked(
    atari_server: ServerThread, game: str
) -> None:
    ws, opened = raw_session(atari_server.url, {"game": game}, palette=True)
    local = AtariEnvironment({"game": game})
    try:
        assert isinstance(opened, Opened) and opened.palette == palette_of(game)
        shape = tuple(opened.spec["observation"]["shape"])
        first = ask(ws, Reset(id=2, seed=9))
        want = local.reset(seed=9)
        assert isinstance(first, Result) and first.obs.shape == shape[:2]
        np.testing.assert_array_equal(expanded(first.obs, opened.palette), want.obs)
        for t, a in enumerate(ACTIONS[:40]):
            got = ask(ws, Step(id=3 + t, action=a))
            ref = local.step(a)
            assert got.obs.dtype == np.uint8 and got.obs.shape == shape[:2]
            np.testing.assert_array_equal(expanded(got.obs, opened.palette), ref.obs)
    finally:
        ws.close()
        local.close()


@pytest.mark.parametrize(
    ("config", "fields"),
    [
        ({"game": "pong"}, {}),  # not asked
        ({"game": "pong", "obs_type": "grayscale"}, {"palette": True}),
        ({"game": "pong", "obs_type": "ram"}, {"palette": True}),
    ],
)
def test_otherwise_observations_come_as_they_are(
    atari_server: ServerThread, config: dict[str, Any], fields: dict[str, Any]
) -> None:
    ws, opened = raw_session(atari_server.url, config, **fields)
    try:
        assert isinstance(opened, Opened) and opened.palette is None
        shape = tuple(opened.spec["observation"]["shape"])
        assert ask(ws, Reset(id=2, seed=0)).obs.shape == shape
        assert ask(ws, Step(id=3, action=1)).obs.shape == shape
    finally:
        ws.close()


def test_an_environment_without_indexing_answers_nil(fake_server: ServerThread) -> None:
    ws, opened = raw_session(fake_server.url, {"obs_shape": [6, 4, 3]}, palette=True)
    try:
        assert isinstance(opened, Opened) and opened.palette is None
        assert ask(ws, Reset(id=2, seed=0)).obs.shape == (6, 4, 3)
    finally:
        ws.close()


def play(env: Any) -> list[tuple[bytes, float, bool]]:
    first = env.reset(seed=21)
    out = [(first.observation.tobytes(), 0.0, False)]
    for a in ACTIONS:
        r = env.step(a)
        out.append((r.observation.tobytes(), r.reward, r.done))
        if r.done:
            r = env.reset()
            out.append((r.observation.tobytes(), 0.0, False))
    return out


def expected(game: str) -> list[tuple[bytes, float, bool]]:
    class Local:
        def __init__(self) -> None:
            self.env = AtariEnvironment({"game": game})

        def reset(self, seed: int | None = None) -> Any:
            return _Obs(self.env.reset(seed=seed))

        def step(self, a: int) -> Any:
            return _Obs(self.env.step(a))

    local = Local()
    try:
        return play(local)
    finally:
        local.env.close()


class _Obs:
    def __init__(self, r: Any) -> None:
        self.observation, self.reward = r.obs, r.reward
        self.done = r.terminated or r.truncated


@pytest.mark.parametrize("shared_memory", [True, False])
def test_the_sync_client_hands_out_the_rgb_frames_of_a_full_colour_session(
    atari_server: ServerThread, shared_memory: bool
) -> None:
    with EnvClient(
        atari_server.url,
        config={"game": "breakout"},
        indexed_frames=True,
        shared_memory=shared_memory,
    ) as env:
        assert env._core.palette == palette_of("breakout")
        assert env.shared_memory_used is shared_memory
        got = play(env)
        assert env.reset(seed=0).observation.flags.writeable is False
    assert got == expected("breakout")


def test_indexed_frames_false_keeps_full_colour(atari_server: ServerThread) -> None:
    with EnvClient(atari_server.url, config={"game": "breakout"}, indexed_frames=False) as env:
        assert not env.indexed_frames_used
        assert play(env) == expected("breakout")


def test_the_clients_ask_by_default_when_the_c_expander_is_built(
    atari_server: ServerThread,
) -> None:
    with EnvClient(atari_server.url, config={"game": "pong"}) as env:
        assert env.indexed_frames_used is NATIVE


def test_the_http_client_does_not_ask(atari_server: ServerThread) -> None:
    with HTTPEnvClient(atari_server.http_url, config={"game": "pong"}) as env:
        assert not env.indexed_frames_used
        assert env.reset(seed=0).observation.shape == (210, 160, 3)


async def test_the_async_client_expands_too(atari_server: ServerThread) -> None:
    async with AsyncEnvClient(
        atari_server.url, config={"game": "breakout"}, indexed_frames=True
    ) as env:
        assert env.indexed_frames_used
        first = await env.reset(seed=21)
        out = [(first.observation.tobytes(), 0.0, False)]
        for a in ACTIONS:
            r = await env.step(a)
            out.append((r.observation.tobytes(), r.reward, r.done))
            if r.done:
                r = await env.reset()
                out.append((r.observation.tobytes(), 0.0, False))
    assert out == expected("breakout")


def test_vector_sessions_match_full_colour_ones(atari_server: ServerThread) -> None:
    kwargs: dict[str, Any] = {"config": {"game": "pong"}, "num_envs": 4}
    with (
        VectorEnvClient(atari_server.url, indexed_frames=True, **kwargs) as fast,
        VectorEnvClient(atari_server.url, indexed_frames=False, **kwargs) as plain,
    ):
        assert all(core.palette is not None for core in (slot.core for slot in fast._slots))
        assert all(core.palette is None for core in (slot.core for slot in plain._slots))
        a, _ = fast.reset(seed=4)
        b, _ = plain.reset(seed=4)
        np.testing.assert_array_equal(a, b)
        for t in range(60):
            actions = np.array([(t + i) % 6 for i in range(4)])
            x, y = fast.step(actions), plain.step(actions)
            np.testing.assert_array_equal(x[0], y[0])
            np.testing.assert_array_equal(x[1], y[1])
            assert x[0].shape == (4, 210, 160, 3)


def test_a_resumed_session_keeps_its_palette() -> None:
    with (
        serve(atari_factory) as server,
        CutProxy(server.port) as proxy,
        EnvClient(proxy.url, config={"game": "breakout"}, indexed_frames=True) as env,
    ):
        palette = env._core.palette
        assert palette is not None
        first = env.reset(seed=21)
        out = [(first.observation.tobytes(), 0.0, False)]
        for t, a in enumerate(ACTIONS):
            if t in (15, 60):
                proxy.arm("reply")
            r = env.step(a)
            out.append((r.observation.tobytes(), r.reward, r.done))
            if r.done:
                r = env.reset()
                out.append((r.observation.tobytes(), 0.0, False))
        assert proxy.cuts == 2 and env._core.palette == palette
    assert out == expected("breakout")


def test_a_client_refuses_a_palette_for_observations_that_are_not_rgb() -> None:
    core = ClientCore({}, token=None, max_frame_size=1 << 20, indexed_frames=True)
    spec = {
        "action": {"type": "discrete", "n": 2},
        "observation": {"type": "array", "shape": [210, 160], "dtype": "uint8"},
    }
    opened = Opened(id=1, session_id="s", spec=spec, palette=bytes(768))
    with pytest.raises(ProtocolError, match="not uint8 RGB arrays"):
        core.opened(opened)
