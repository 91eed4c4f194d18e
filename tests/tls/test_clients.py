"""Every client over wss:// / https:// against a real uvicorn server serving TLS."""

from __future__ import annotations

import asyncio
import re
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openenv_ws import OpenEnvError
from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient, VectorEnvClient
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.server import ServerThread
from openenv_ws.testing import FakeEnvironment
from openenv_ws.wire.framing import OP_BINARY, serialize
from openenv_ws.wire.handshake import accept_key

from ..conftest import UNIT
from .conftest import Pki

CONFIG = {"obs_shape": [6, 5, 3], "episode_length": 50}
ACTIONS = [1, 2, 3, 0, 1, 1]


def expected() -> list[np.ndarray[Any, Any]]:
    local = FakeEnvironment(dict(CONFIG))
    return [local.reset(seed=7).obs] + [local.step(a).obs for a in ACTIONS]


def play(env: Any, seed: int = 7, actions: list[int] = ACTIONS) -> list[Any]:
    """The observations of a blocking client's reset and steps."""
    return [env.reset(seed=seed).observation] + [env.step(a).observation for a in actions]


def assert_frames(got: list[Any], want: list[Any]) -> None:
    assert len(got) <= len(want)
    for a, b in zip(got, want, strict=False):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("trust", ["ca_file", "ca_path", "ssl_context"])
def test_sync_client_plays_over_wss(tls_server: ServerThread, pki: Pki, trust: str) -> None:
    assert tls_server.url.startswith("wss://")
    options: dict[str, Any] = {
        "ca_file": {"ca_file": str(pki.ca_file)},
        "ca_path": {"ca_file": pki.ca_file},
        "ssl_context": {"ssl_context": pki.context()},
    }[trust]
    with EnvClient(tls_server.url, config=CONFIG, **options) as env:
        assert_frames(play(env), expected())


def test_sync_client_busy_polls_over_wss(tls_server: ServerThread, pki: Pki) -> None:
    # An SSLSocket refuses recv flags (MSG_DONTWAIT): the spin must not use them.
    with EnvClient(tls_server.url, config=CONFIG, ca_file=pki.ca_file, busy_poll=0.002) as env:
        assert_frames(play(env), expected())


def test_async_client_plays_over_wss(tls_server: ServerThread, pki: Pki) -> None:
    async def play_async() -> list[Any]:
        async with AsyncEnvClient(tls_server.url, config=CONFIG, ca_file=pki.ca_file) as env:
            first = (await env.reset(seed=7)).observation
            return [first] + [(await env.step(a)).observation for a in ACTIONS]

    assert_frames(asyncio.run(play_async()), expected())


def test_vector_client_plays_over_wss(tls_server: ServerThread, pki: Pki) -> None:
    with VectorEnvClient(tls_server.url, 3, config=CONFIG, ca_file=pki.ca_file) as envs:
        obs, _ = envs.reset(seed=7)
        np.testing.assert_array_equal(obs[0], expected()[0])
        for a in ACTIONS:
            envs.send([a] * 3)
            got = envs.recv(min_envs=3)
            assert sorted(got[4]["env_id"].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("encoding", ["msgpack", "json"])
def test_http_client_plays_over_https(
    tls_server: ServerThread, pki: Pki, encoding: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tls_server.http_url.startswith("https://")
    made: list[object] = []
    connect = socket.create_connection
    monkeypatch.setattr(
        socket, "create_connection", lambda *a, **k: made.append(a) or connect(*a, **k)
    )
    with HTTPEnvClient(
        tls_server.http_url, config=CONFIG, ca_file=pki.ca_file, encoding=encoding
    ) as env:
        assert_frames(play(env), expected())
    assert len(made) == 1  # one kept-alive TLS connection for the whole session


def test_shared_memory_still_works_over_tls_on_loopback(tls_server: ServerThread, pki: Pki) -> None:
    with EnvClient(tls_server.url, config=CONFIG, ca_file=pki.ca_file) as env:
        assert env.shared_memory_used  # the offer is a handshake header: TLS changes nothing
        np.testing.assert_array_equal(env.reset(seed=7).observation, expected()[0])


def test_the_web_pages_wss_handshake_passes_the_origin_check(
    tls_server: ServerThread, pki: Pki
) -> None:
    # A page loaded from https://host:port connects to wss://host:port with that origin.
    origin = tls_server.http_url
    ws = BlockingWebSocket(tls_server.url, ssl_context=pki.context(), headers={"Origin": origin})
    ws.close()
    foreign = {"Origin": "https://example.org"}
    with pytest.raises(OpenEnvError, match="403"):
        BlockingWebSocket(tls_server.url, ssl_context=pki.context(), headers=foreign)


def test_routes_and_web_page_over_https(tls_server: ServerThread, pki: Pki) -> None:
    import urllib.request

    context = pki.context()
    for path, needle in (("/health", b'"status"'), ("/metrics", b"openenv_ws_"), ("/web/", b"<")):
        with urllib.request.urlopen(tls_server.http_url + path, context=context) as answer:
            assert answer.status == 200 and needle in answer.read(), path


# ---------------------------------------------------------------------- Atari frames over TLS

PONG = {"game": "pong", "obs_type": "rgb", "frameskip": 4, "repeat_action_probability": 0.25}
PONG_ACTIONS = [int(a) for a in np.random.default_rng(3).integers(0, 6, 40)]
#: Every frame byte through the socket (no shared memory).
WIRE = {"config": PONG, "shared_memory": False}


@pytest.fixture(scope="module")
def pong_frames(atari_server: ServerThread) -> list[np.ndarray[Any, Any]]:
    """Pong frames over plain ws:// (full RGB bytes on the socket), the reference."""
    with EnvClient(atari_server.url, **WIRE) as env:
        return play(env, 5, PONG_ACTIONS)


@pytest.mark.parametrize("indexed", [False, True], ids=["rgb-bytes", "colour-codes"])
def test_atari_frames_cross_tls_records_intact(
    tls_atari_server: ServerThread, pki: Pki, pong_frames: list[Any], indexed: bool
) -> None:
    # 100 KB frames span several 16 KB TLS records; no shared memory, so every byte
    # crosses the TLS socket.
    with EnvClient(
        tls_atari_server.url, ca_file=pki.ca_file, indexed_frames=indexed, **WIRE
    ) as env:
        got = play(env, 5, PONG_ACTIONS)
    assert got[0].shape == (210, 160, 3) and len(got) == len(pong_frames)
    assert_frames(got, pong_frames)


def test_atari_vector_send_recv_over_tls(
    tls_atari_server: ServerThread, pki: Pki, pong_frames: list[Any]
) -> None:
    # Replies of four sessions read whenever their sockets are ready: a wait on the
    # descriptor alone would miss bytes already decrypted inside the TLS layer.
    with VectorEnvClient(
        tls_atari_server.url,
        4,
        ca_file=pki.ca_file,
        indexed_frames=False,
        timeout=30 * UNIT,
        **WIRE,
    ) as envs:
        obs, _ = envs.reset(seed=[5, 5, 5, 5])
        for row in obs:
            np.testing.assert_array_equal(row, pong_frames[0])
        for i, a in enumerate(PONG_ACTIONS):
            envs.send([a] * 4)
            seen: list[int] = []
            while len(seen) < 4:
                rows, *_, infos = envs.recv(min_envs=1)
                for row, env_id in zip(rows, infos["env_id"].tolist(), strict=True):
                    np.testing.assert_array_equal(row, pong_frames[i + 1])
                    seen.append(env_id)
            assert sorted(seen) == [0, 1, 2, 3]


def test_async_and_http_atari_over_tls(
    tls_atari_server: ServerThread, pki: Pki, pong_frames: list[Any]
) -> None:
    async def play_async() -> list[Any]:
        async with AsyncEnvClient(tls_atari_server.url, ca_file=pki.ca_file, **WIRE) as env:
            first = (await env.reset(seed=5)).observation
            return [first] + [(await env.step(a)).observation for a in PONG_ACTIONS[:10]]

    assert_frames(asyncio.run(play_async()), pong_frames)
    with HTTPEnvClient(tls_atari_server.http_url, config=PONG, ca_file=pki.ca_file) as env:
        assert_frames(play(env, 5, PONG_ACTIONS[:10]), pong_frames)


# ---------------------------------------------------------------------- bytes inside the TLS layer


@pytest.fixture
def scripted_tls(pki: Pki) -> Iterator[tuple[str, threading.Event]]:
    """A TLS WebSocket server that, once told, sends two small messages in one write."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.server))
    listener = socket.create_server(("127.0.0.1", 0))
    go = threading.Event()
    done = threading.Event()

    def serve() -> None:
        raw, _ = listener.accept()
        with context.wrap_socket(raw, server_side=True) as conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            key = re.search(rb"Sec-WebSocket-Key: *(\S+)", head, re.I)
            assert key is not None
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                + accept_key(key.group(1)).encode()
                + b"\r\n\r\n"
            )
            go.wait(10 * UNIT)
            conn.sendall(
                serialize(OP_BINARY, b"a" * 40, mask=False)
                + serialize(OP_BINARY, b"b" * 40, mask=False)
            )
            done.wait(10 * UNIT)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"wss://127.0.0.1:{listener.getsockname()[1]}/ws", go
    done.set()
    thread.join(10 * UNIT)
    listener.close()


def test_bytes_decrypted_inside_tls_count_as_buffered(
    scripted_tls: tuple[str, threading.Event], pki: Pki
) -> None:
    url, go = scripted_tls
    ws = BlockingWebSocket(url, ssl_context=pki.context())
    try:
        # A read buffer the size of the first message: the second one, which came in
        # the same TLS record, stays inside the SSL object.
        conn = ws.connection
        conn.buf = bytearray(42)
        conn.view = memoryview(conn.buf)
        conn.start = conn.end = 0
        go.set()
        assert ws.recv(bytes, timeout=10 * UNIT) == b"a" * 40
        # The kernel holds nothing more; only the TLS layer does.
        assert select.select([ws.fileno()], [], [], 0)[0] == []
        assert ws.buffered == 42
        assert ws.recv_nowait(bytes) == b"b" * 40
        assert ws.buffered == 0
    finally:
        ws.close(timeout=0.1)


def test_tls_options_are_checked_before_connecting(pki: Pki, tmp_path: Path) -> None:
    url = "wss://127.0.0.1:9/ws"  # nothing listens on port 9 (discard); never reached
    with pytest.raises(ValueError, match="not both"):
        EnvClient(url, ca_file=pki.ca_file, ssl_context=pki.context())
    with pytest.raises(ValueError, match="does not exist"):
        EnvClient(url, ca_file=tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot be used as a CA bundle"):
        EnvClient(url, ca_file=tmp_path / "junk.pem")
    with pytest.raises(TypeError, match=r"ssl\.SSLContext"):
        EnvClient(url, ssl_context="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no server URL uses TLS"):
        EnvClient("ws://127.0.0.1:9/ws", ca_file=pki.ca_file)
    with pytest.raises(ValueError, match="no server URL uses TLS"):
        HTTPEnvClient("http://127.0.0.1:9", ssl_context=pki.context())


def test_typed_and_gymnasium_clients_pass_the_tls_options_on(
    tls_atari_server: ServerThread, pki: Pki, pong_frames: list[Any]
) -> None:
    from atari import AtariEnv
    from openenv_ws.gym import RemoteEnv

    options = {k: v for k, v in PONG.items() if k != "game"}
    with AtariEnv(tls_atari_server.url, game="pong", ca_file=pki.ca_file, **options) as env:
        first = env.reset(seed=5).observation
        np.testing.assert_array_equal(first.screen, pong_frames[0])
    with RemoteEnv(tls_atari_server.url, config=PONG, ca_file=pki.ca_file) as remote:
        obs, _ = remote.reset(seed=5)
        np.testing.assert_array_equal(obs, pong_frames[0])
