"""Compressed sessions over real sockets (SPEC section 19): every mode hands the user
exactly the frames of an uncompressed session, whatever happens to the session."""

from __future__ import annotations

import base64
import functools
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest

from atari import AtariEnvironment, atari_factory
from atari.palettes import NTSC_GAMES, PAL_GAMES
from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.server import ServerLimits, ServerThread, create_app

from ...server.reliability.conftest import serve
from ...server.reliability.proxy import CutProxy

GAMES = ["pong", "breakout", "ms_pacman", "space_invaders", "seaquest"]  # NTSC
GAMES += ["pacman", "keystone_kapers", "mr_do", "air_raid", "klax"]  # PAL
MODES = [("zstd", False), ("zstd", True), ("lz4", False), ("lz4", True)]
ACTIONS = [(7 * t + 3) % 4 for t in range(90)]  # every game here has 4 actions or more
Trace = list[tuple[Any, ...]]


def test_the_games_cover_both_colour_systems() -> None:
    assert set(GAMES[:5]) <= NTSC_GAMES and set(GAMES[5:]) <= PAL_GAMES


def play(env: Any, seed: int = 5) -> Trace:
    """Reset, steps (some without observation), a snapshot, a restore, a reset mid-episode."""
    out: Trace = []

    def keep(tag: str, r: Any) -> None:
        obs = None if r.observation is None else r.observation.tobytes()
        out.append((tag, obs, r.reward, r.done))

    keep("reset", env.reset(seed=seed))
    snapshot = None
    for t, a in enumerate(ACTIONS):
        if t == 20:
            snapshot = env.snapshot()
        if t == 45:
            keep("restore", env.restore(snapshot))
        if t == 70:
            keep("reset", env.reset(seed=seed + 1))
        r = env.step(a, obs=t % 9 != 4)
        keep("step", r)
        if r.done:
            keep("reset", env.reset())
    return out


class Local:
    """The in-process environment with the client's method names."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.env = AtariEnvironment(config)

    def _r(self, r: Any, obs: bool = True) -> Any:
        return _R(r.obs if obs else None, r.reward, r.terminated or r.truncated)

    def reset(self, seed: int | None = None) -> Any:
        return self._r(self.env.reset(seed=seed))

    def step(self, a: int, obs: bool = True) -> Any:
        return self._r(self.env.step(a), obs)

    def snapshot(self) -> bytes:
        return self.env.snapshot()

    def restore(self, blob: bytes) -> Any:
        return self._r(self.env.restore(blob))


class _R:
    def __init__(self, obs: Any, reward: float, done: bool) -> None:
        self.observation, self.reward, self.done = obs, reward, done


@functools.cache
def expected(game: str, obs_type: str = "rgb") -> Trace:
    local = Local({"game": game, "obs_type": obs_type})
    try:
        return play(local)
    finally:
        local.env.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(atari_factory)) as live:
        yield live


@pytest.mark.parametrize("game", GAMES)
@pytest.mark.parametrize(("codec", "delta"), MODES, ids=["zstd", "zstd+delta", "lz4", "lz4+delta"])
def test_every_mode_gives_the_frames_of_an_uncompressed_session(
    server: ServerThread, game: str, codec: str, delta: bool
) -> None:
    with EnvClient(
        server.url, config={"game": game}, compression=codec, delta=delta, shared_memory=False
    ) as env:
        assert env.compression == (f"{codec}+delta" if delta else codec)
        assert env.indexed_frames_used
        got = play(env)
        packer = env._core.unpacker
        assert packer is not None and packer.serial > 0
    assert got == expected(game)


@pytest.mark.parametrize("obs_type", ["rgb", "grayscale"])
def test_full_colour_and_grayscale_frames_compress_too(server: ServerThread, obs_type: str) -> None:
    config = {"game": "breakout", "obs_type": obs_type}
    with EnvClient(
        server.url, config=config, compression="zstd", indexed_frames=False, shared_memory=False
    ) as env:
        assert env.compression == "zstd+delta" and not env.indexed_frames_used
        assert play(env) == expected("breakout", obs_type)


def test_by_default_a_loopback_session_is_not_compressed(server: ServerThread) -> None:
    with EnvClient(server.url, config={"game": "pong"}) as env:
        assert env.compression is None


def test_a_server_without_compression_sends_frames_raw() -> None:
    app = create_app(atari_factory, limits=ServerLimits(compression=()))
    with (
        ServerThread(app) as live,
        EnvClient(live.url, config={"game": "pong"}, compression="zstd") as env,
    ):
        assert env.compression is None
        assert play(env) == expected("pong")


def test_the_servers_preference_decides() -> None:
    app = create_app(atari_factory, limits=ServerLimits(compression=("lz4", "zstd")))
    with (
        ServerThread(app) as live,
        EnvClient(live.url, config={"game": "pong"}, compression=["zstd", "lz4"]) as env,
    ):
        assert env.compression == "lz4+delta"


def test_an_unknown_codec_is_a_value_error_before_connecting() -> None:
    with pytest.raises(ValueError, match="compression 'brotli' is not available"):
        EnvClient("ws://127.0.0.1:9/ws", compression="brotli")


def test_frames_in_shared_memory_are_not_compressed(server: ServerThread) -> None:
    with EnvClient(server.url, config={"game": "pong"}, compression="zstd") as env:
        assert env.shared_memory_used and env.compression == "zstd+delta"
        assert play(env) == expected("pong")
        assert env._core.unpacker is not None and env._core.unpacker.serial == 0


@pytest.mark.parametrize("how", ["reply", "request"])
def test_resumed_connections_keep_delta_frames_right(how: str) -> None:
    """A lost reply is sent again from the replay cache (a delta against the frame the
    client holds); a fresh one after the resumption is a key frame."""
    with (
        serve(atari_factory) as live,
        CutProxy(live.port) as proxy,
        EnvClient(proxy.url, config={"game": "breakout"}, compression="zstd") as env,
    ):
        assert env.compression == "zstd+delta"
        first = env.reset(seed=5)
        out = [(first.observation.tobytes(), 0.0, False)]
        for t, a in enumerate(ACTIONS):
            if t in (10, 11, 50):
                proxy.arm(how)
            r = env.step(a)
            out.append((r.observation.tobytes(), r.reward, r.done))
        assert proxy.cuts == 3
    local = Local({"game": "breakout"})
    want = [(local.reset(seed=5).observation.tobytes(), 0.0, False)]
    for a in ACTIONS:
        r = local.step(a)
        want.append((r.observation.tobytes(), r.reward, r.done))
    local.env.close()
    assert out == want


async def test_the_async_client_decompresses(server: ServerThread) -> None:
    async with AsyncEnvClient(
        server.url, config={"game": "seaquest"}, compression="lz4", shared_memory=False
    ) as env:
        assert env.compression == "lz4+delta"
        first = await env.reset(seed=5)
        got = [first.observation.tobytes()]
        for a in ACTIONS[:40]:
            got.append((await env.step(a)).observation.tobytes())
    local = Local({"game": "seaquest"})
    want = [local.reset(seed=5).observation.tobytes()]
    want += [local.step(a).observation.tobytes() for a in ACTIONS[:40]]
    local.env.close()
    assert got == want


def test_the_http_client_gets_key_frames_only(server: ServerThread) -> None:
    with (
        HTTPEnvClient(server.http_url, config={"game": "pong"}, compression="zstd") as env,
        HTTPEnvClient(server.http_url, config={"game": "pong"}, compression=None) as plain,
    ):
        assert env.compression == "zstd" and plain.compression is None
        np.testing.assert_array_equal(
            env.reset(seed=3).observation, plain.reset(seed=3).observation
        )
        for a in ACTIONS[:30]:
            np.testing.assert_array_equal(env.step(a).observation, plain.step(a).observation)


def test_vector_sessions_match_uncompressed_ones(server: ServerThread) -> None:
    kwargs: dict[str, Any] = {"config": {"game": "pong"}, "num_envs": 3, "shared_memory": False}
    with (
        VectorEnvClient(server.url, compression="zstd", **kwargs) as packed,
        VectorEnvClient(server.url, compression=None, **kwargs) as plain,
    ):
        assert all(slot.core.compression == "zstd+delta" for slot in packed._slots)
        a, _ = packed.reset(seed=4)
        b, _ = plain.reset(seed=4)
        np.testing.assert_array_equal(a, b)
        for t in range(60):
            actions = np.array([(t + i) % 6 for i in range(3)])
            x, y = packed.step(actions), plain.step(actions)
            np.testing.assert_array_equal(x[0], y[0])
            np.testing.assert_array_equal(x[1], y[1])


def test_a_json_view_carries_the_array_itself(server: ServerThread) -> None:
    """A session opened with msgpack and compression, read as JSON: arrays as usual."""

    def post(path: str, body: bytes, media: str, accept: str) -> bytes:
        request = urllib.request.Request(
            f"{server.http_url}/v1/sessions{path}",
            data=body,
            headers={"Content-Type": media, "Accept": accept},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())

    open_body = {"op": "open", "id": 1, "version": 1, "config": {"game": "pong"}}
    opened = msgpack.unpackb(
        post("", msgpack.packb({**open_body, "compress": ["zstd"], "delta": True}),
             "application/msgpack", "application/msgpack")
    )  # fmt: skip
    assert opened["compress"] == "zstd" and opened["delta"] is False  # no deltas over HTTP
    sid = opened["session_id"]
    reply = json.loads(
        post(f"/{sid}/reset", b'{"seed": 2}', "application/json", "application/json")
    )
    assert reply["obs"]["$ndarray"] == "uint8" and reply["obs"]["shape"] == [210, 160, 3]
    local = Local({"game": "pong"})
    want = local.reset(seed=2).observation
    local.env.close()
    got = np.frombuffer(base64.b64decode(reply["obs"]["data"]), np.uint8).reshape(210, 160, 3)
    np.testing.assert_array_equal(got, want)
