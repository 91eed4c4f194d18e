"""Hostile input around compressed observations, on the raw wire: malformed offers in
``open`` while a compressed session steps alongside, and damaged compressed arrays from
a server, which the client refuses without losing its session."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest

from atari import atari_factory
from openenv_ws._arrays import ext_header
from openenv_ws.client import EnvClient
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.errors import ProtocolError
from openenv_ws.protocol import Opened, Result, decode_server_frame, encode
from openenv_ws.server import ServerThread, create_app
from openenv_ws.wire.compress import CompressedArray, ObsPacker
from openenv_ws.wire.native import encode_result

from ...client.test_native_wire import Scripted
from ...client.test_transports import frame
from ...conftest import UNIT


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(atari_factory)) as live:
        yield live


def raw_open(url: str, **fields: Any) -> Any:
    """Send an ``open`` map with these fields as they are; the server's answer."""
    ws = BlockingWebSocket(url, open_timeout=5 * UNIT)
    try:
        ws.send(msgpack.packb({"op": "open", "id": 4, "version": 1, "config": {}, **fields}))
        return ws.recv(decode_server_frame, timeout=5 * UNIT)
    finally:
        ws.close()


BAD_OFFERS = [
    ({"compress": "zstd"}, "field 'compress' must be a list of at most 16 codec names"),
    ({"compress": [1]}, "field 'compress' must be a list"),
    ({"compress": ["z" * 33]}, "strings of up to 32 characters"),
    ({"compress": ["zstd"] * 17}, "at most 16 codec names"),
    ({"compress": {"zstd": True}}, "field 'compress' must be a list"),
    ({"compress": ["zstd"], "delta": 1}, "field 'delta' must be a boolean"),
]


def test_malformed_offers_are_refused_while_a_compressed_session_steps(
    server: ServerThread,
) -> None:
    with EnvClient(
        server.url, config={"game": "pong"}, compression="zstd", shared_memory=False
    ) as healthy:
        assert healthy.compression == "zstd+delta"
        healthy.reset(seed=1)
        for fields, message in BAD_OFFERS:
            reply = raw_open(server.url, **fields)
            assert reply.code == "bad_request" and message in reply.message, reply
            assert not reply.fatal
            assert healthy.step(1).observation.shape == (210, 160, 3)


def test_an_offer_of_unknown_codecs_gets_raw_frames(server: ServerThread) -> None:
    opened = raw_open(server.url, compress=["brotli", "snappy"], delta=True)
    assert isinstance(opened, Opened) and opened.compress is None and opened.delta is False


def test_metrics_count_raw_and_sent_bytes_by_mode(server: ServerThread) -> None:
    with EnvClient(
        server.url, config={"game": "pong"}, compression="lz4", delta=False, shared_memory=False
    ) as env:
        env.reset(seed=1)
        for _ in range(30):
            env.step(0)
    text = urllib.request.urlopen(f"{server.http_url}/metrics", timeout=5 * UNIT).read().decode()
    values = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("openenv_ws_observation_bytes_total{")
    }
    raw, sent = values['kind="raw",mode="lz4"'], values['kind="sent",mode="lz4"']
    assert raw >= 31 * 210 * 160  # colour codes: one byte a pixel
    assert 0 < sent < raw / 5


# ----------------------------------------------------------------- a server that misbehaves

SPEC = {
    "action": {"type": "discrete", "n": 4, "meanings": []},
    "observation": {"type": "array", "shape": [60, 40], "dtype": "uint8"},
}


def _damage(packed: CompressedArray) -> CompressedArray:
    """The array with its compressed bytes cut short (its headers made to agree)."""
    data = packed.data[:-3]
    prefix = packed.head[3:] if packed.head[0] == 0xC7 else packed.head[4:]
    return CompressedArray(ext_header(len(prefix) + len(data), 3) + prefix, data, packed.source)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_the_client_refuses_damaged_arrays_and_keeps_its_session(codec: str) -> None:
    """Each refusal names the problem; the connection stays up, and after a key frame
    (the next reset) deltas are taken again."""
    rng = np.random.default_rng(5)
    frames = [rng.integers(0, 4, (60, 40), dtype=np.uint8) for _ in range(6)]
    packer = ObsPacker(codec, True)
    oversize = ObsPacker(codec, False).pack(np.zeros((61, 40), np.uint8))

    def script(conn: socket.socket) -> None:
        def answer(obs: Any) -> None:
            rid = msgpack.unpackb(server.read(conn)[1])["id"]
            conn.sendall(frame(2, encode_result(rid, obs, 0.0, False, False, False, {})))

        rid = msgpack.unpackb(server.read(conn)[1])["id"]  # open
        opened = Opened(id=rid, session_id="s", spec=SPEC, compress=codec, delta=True)
        conn.sendall(frame(2, encode(opened)))
        answer(packer.pack(frames[0]))  # reset: a key frame
        answer(packer.pack(frames[1]))  # a delta
        answer(_damage(packer.pack(frames[2])))  # damaged
        answer(packer.pack(frames[3]))  # a delta against the frame the client refused
        packer.key()
        answer(packer.pack(frames[4]))  # reset: a key frame
        answer(packer.pack(frames[5]))  # a delta again
        answer(oversize)
        answer(None)  # a step without observation: the session is still there

    server = Scripted(script)
    with EnvClient(server.url, compression=codec, timeout=10 * UNIT) as env:
        np.testing.assert_array_equal(env.reset().observation, frames[0])
        np.testing.assert_array_equal(env.step(1).observation, frames[1])
        with pytest.raises(ProtocolError, match=r"damaged|decompresses to|declares"):
            env.step(1)
        with pytest.raises(ProtocolError, match="but this client holds none"):
            env.step(1)
        np.testing.assert_array_equal(env.reset().observation, frames[4])
        np.testing.assert_array_equal(env.step(2).observation, frames[5])
        with pytest.raises(ProtocolError, match=r"declares 2440 bytes .* at most 2400"):
            env.step(2)
        assert env.step(3, obs=False).observation is None
    server.join()


def test_a_client_refuses_a_codec_it_did_not_offer() -> None:
    def script(conn: socket.socket) -> None:
        rid = msgpack.unpackb(server.read(conn)[1])["id"]
        opened = Opened(id=rid, session_id="s", spec=SPEC, compress="lz4", delta=False)
        conn.sendall(frame(2, encode(opened)))
        server.read(conn)

    server = Scripted(script)
    with pytest.raises(
        ProtocolError, match="chose compression 'lz4', which this client did not offer"
    ):
        EnvClient(server.url, compression="zstd", timeout=10 * UNIT, resume=False)
    server.join()


def test_a_result_frame_decodes_alike_with_and_without_the_c_reader() -> None:
    packed = ObsPacker("zstd", False).pack(np.arange(2400, dtype=np.uint8).reshape(60, 40))
    data = encode(Result(3, packed, 1.5, False, True, True, {"k": 1}))  # type: ignore[arg-type]
    assert data == encode_result(3, packed, 1.5, False, True, True, {"k": 1})
