"""The clients against a hostile server (issue 35, finding 13), on the raw wire.

A scripted loopback server (a real socket speaking RFC 6455, in a thread)
answers the client's ``open`` with a forged ``opened`` and then forged
results: a spec declaring a gigabyte observation and a 30 KB zstd frame (or a
4 MB LZ4 block) that decompresses to it, a vector batch whose info column is
short, a bool array holding 0x02 in the shared region. Each must be a
ProtocolError, and the client's memory must stay bounded by its own limit
(``max_frame_size``), whatever the server declares.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES, array_head, ext_header
from openenv_ws._shm import (
    DEFAULT_SIZE,
    FIRST_PAGE,
    HEADER,
    ServerRegion,
    shared_memory_supported,
)
from openenv_ws.client import AsyncEnvClient, EnvClient, VectorEnvClient
from openenv_ws.client._core import ClientCore
from openenv_ws.client.vector_session import VectorSessionClient
from openenv_ws.errors import ProtocolError
from openenv_ws.protocol import Batch, Opened, encode
from openenv_ws.wire.compress import CODECS, CompressedArray
from openenv_ws.wire.native import encode_result

from ..conftest import UNIT
from .test_native_wire import Scripted
from .test_transports import accept, frame

GIB = 10**9
#: The most the tests let the client's peak RSS grow (the attacks aim at gigabytes).
RSS_BOUND = 256 << 20
DISCRETE = {"type": "discrete", "n": 4, "meanings": []}


def _peak_rss() -> int:
    """This process's peak resident set, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Forger(Scripted):
    """A :class:`Scripted` server whose handshake answer `answer(head)` may add headers
    (the shared region's); its script may find the client gone (the client refused)."""

    def __init__(
        self,
        script: Callable[[socket.socket], None],
        answer: Callable[[bytes], bytes] = accept,
    ) -> None:
        self._answer = answer
        super().__init__(script)

    def _run(self, script: Callable[[socket.socket], None]) -> None:
        try:
            conn, _ = self._listener.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                conn.sendall(self._answer(head))
                # The client may refuse and hang up: what the tests want.
                with contextlib.suppress(EOFError, ConnectionError):
                    script(conn)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def request_id(self, conn: socket.socket) -> int:
        """The id of the client's next request."""
        opcode, data = self.read(conn)
        if opcode == 8:
            raise EOFError  # the client's close
        rid: int = msgpack.unpackb(data)["id"]
        return rid

    def answer(self, conn: socket.socket, obs: Any) -> None:
        """Answer the next request with a result holding `obs`."""
        rid = self.request_id(conn)
        conn.sendall(frame(2, encode_result(rid, obs, 0.0, False, False, False, {})))


def opening(spec: dict[str, Any], compress: str | None = None) -> Forger:
    """A server that answers ``open`` with an ``opened`` of `spec`, then waits for the
    client's next frame (its close, when it refuses the session)."""

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=spec, compress=compress))))
        server.read(conn)

    server = Forger(script)
    return server


# ------------------------------------------------------------------ decompression bombs


def _zstd_zeros(n: int) -> bytes:
    """One zstd frame of `n` zero bytes (its content size written), made in 1 MiB steps."""
    compressor = zstandard.ZstdCompressor(level=1).compressobj(size=n)
    chunk = memoryview(bytes(1 << 20))
    parts = []
    while n:
        k = min(n, len(chunk))
        parts.append(compressor.compress(chunk[:k]))
        n -= k
    parts.append(compressor.flush())
    return b"".join(parts)


def _lz4_zeros(n: int) -> bytes:
    """An LZ4 block of `n` zero bytes, written by hand (nothing of `n` bytes is made):
    one literal zero, a match of offset 1 over all but the last 12 bytes, 12 literals."""
    rest = n - 13 - 4 - 15  # the match's length beyond the token's 4 + 15
    lengths = b"\xff" * (rest // 255) + bytes((rest % 255,))
    return b"\x1f\x00\x01\x00" + lengths + bytes((12 << 4,)) + bytes(12)


def _compressed(codec: str, shape: tuple[int, ...], data: bytes) -> CompressedArray:
    """A compressed uint8 array (ext type 3) of `shape` holding the codec's `data`."""
    head = struct.pack("<BBI", CODECS[codec], 0, 1) + array_head(DTYPE_CODES["uint8"], shape)
    return CompressedArray(ext_header(len(head) + len(data), 3) + head, data, np.zeros(0, np.uint8))


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """A gigabyte of zeros, compressed: ~30 KB of zstd, ~4 MB of LZ4."""
    return {"zstd": _zstd_zeros(GIB), "lz4": _lz4_zeros(GIB)}


async def _reset_and_step(url: str, codec: str) -> None:
    async with AsyncEnvClient[Any](
        url, compression=codec, shared_memory=False, timeout=10 * UNIT, resume=False
    ) as env:
        await env.reset()
        await env.step(0)


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_gigabyte_spec_and_a_small_compressed_frame_are_refused(
    codec: str, kind: str, bombs: dict[str, bytes]
) -> None:
    """The spec declares observations of shape [10**9]; the frame that follows
    decompresses to them. The client refuses (at open, or at the latest when the
    frame comes) without allocating them: its limit is its own max_frame_size."""
    spec = {"action": DISCRETE, "observation": {"type": "array", "shape": [GIB], "dtype": "uint8"}}
    bomb = _compressed(codec, (GIB,), bombs[codec])
    assert bomb.nbytes < 4 << 20  # within every frame limit, 250x below what it holds

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=spec, compress=codec))))
        server.answer(conn, bomb)  # the reset
        server.answer(conn, bomb)  # a step

    before = _peak_rss()
    server = Forger(script)
    with pytest.raises(ProtocolError, match=r"declared observations of 1000000000 bytes"):
        if kind == "async":
            asyncio.run(_reset_and_step(server.url, codec))
        else:
            with EnvClient[Any](
                server.url, compression=codec, shared_memory=False, timeout=10 * UNIT, resume=False
            ) as env:
                env.reset()
                env.step(0)
    server.join()
    assert _peak_rss() - before < RSS_BOUND


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_vector_batch_above_the_clients_limit_is_refused(
    codec: str, bombs: dict[str, bytes]
) -> None:
    """A vector session's batch counts whole: 4 observations of 250 MB each declared,
    each within a frame's limit alone, are 1 GB per batch."""
    one = GIB // 4
    spec = {
        "action": DISCRETE,
        "observation": {"type": "array", "shape": [one], "dtype": "uint8"},
        "num_envs": 4,
        "batch_size": 4,
        "autoreset_mode": "next_step",
    }
    bomb = _compressed(codec, (4, one), bombs[codec])

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=spec, compress=codec))))
        rid = server.request_id(conn)
        batch = Batch(
            rid,
            bomb,
            np.zeros(4),
            np.zeros(4, np.bool_),
            np.zeros(4, np.bool_),
            np.arange(4, dtype=np.int32),
            {},
        )
        conn.sendall(frame(2, encode(batch)))

    before = _peak_rss()
    server = Forger(script)
    with (
        pytest.raises(ProtocolError, match=r"4 observations of 250000000"),
        VectorSessionClient(
            server.url,
            4,
            compression=codec,
            shared_memory=False,
            max_frame_size=512 << 20,
            timeout=10 * UNIT,
        ) as envs,
    ):
        envs.reset()
    server.join()
    assert _peak_rss() - before < RSS_BOUND


def test_a_batch_of_sessions_above_the_clients_limit_is_refused() -> None:
    """A vector client of one session per env gathers their observations into one
    batch: 4 observations of 20 MiB, each within the limit, are 80 MiB together."""
    spec = {
        "action": DISCRETE,
        "observation": {"type": "array", "shape": [20 << 20], "dtype": "uint8"},
    }
    servers = [opening(spec) for _ in range(4)]
    with pytest.raises(
        ProtocolError, match=r"83886080 bytes per batch \(4 observations of 20971520\)"
    ):
        VectorEnvClient(
            [s.url for s in servers], compression=None, shared_memory=False, timeout=10 * UNIT
        )
    for server in servers:
        server.join()


def test_a_client_that_raises_its_limit_takes_a_large_compressed_batch() -> None:
    """The bound is the client's: raised, a legitimate large batch still decodes."""
    spec = {
        "action": DISCRETE,
        "observation": {"type": "array", "shape": [3 << 20], "dtype": "uint8"},
        "num_envs": 2,
        "batch_size": 2,
        "autoreset_mode": "next_step",
    }
    obs = np.zeros((2, 3 << 20), np.uint8)
    obs[1, ::4096] = 7
    packed = _compressed("zstd", obs.shape, zstandard.ZstdCompressor().compress(obs.tobytes()))

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=spec, compress="zstd"))))
        rid = server.request_id(conn)
        ids = np.arange(2, dtype=np.int32)
        flags = np.zeros(2, np.bool_)
        conn.sendall(frame(2, encode(Batch(rid, packed, np.zeros(2), flags, flags, ids, {}))))
        server.read(conn)  # the close

    server = opening(spec, "zstd")
    with pytest.raises(ProtocolError, match=r"over this client's limit of 4194304 bytes"):
        VectorSessionClient(
            server.url, 2, compression="zstd", shared_memory=False, max_frame_size=4 << 20
        )
    server.join()
    server = Forger(script)
    with VectorSessionClient(
        server.url, 2, compression="zstd", shared_memory=False, max_frame_size=8 << 20
    ) as envs:
        got, _ = envs.reset()
        np.testing.assert_array_equal(got, obs)
    server.join()


# ------------------------------------------------------------------ batch columns

VECTOR_SPEC = {
    "action": DISCRETE,
    "observation": {"type": "array", "shape": [4, 3], "dtype": "uint8"},
    "num_envs": 4,
    "batch_size": 4,
    "autoreset_mode": "next_step",
}


@pytest.mark.parametrize(
    ("env_ids", "info", "column"),
    [
        ([0, 1, 2, 3], {"lives": np.array([3, 3], np.int32)}, "'info.lives' has 2 rows"),
        ([1, 0, 3, 2], {"lives": np.array([3, 3], np.int32)}, "'info.lives' has 2 rows"),
        ([1, 0, 3, 2], {"deep": {"x": [1, 2, 3, 4, 5]}}, "'info.deep.x' has 5 rows"),
        ([0, 1, 2, 3], {"final_obs": 7}, "'info.final_obs' has no rows \\(int\\)"),
    ],
)
def test_a_batch_column_of_the_wrong_length_is_a_protocol_error(
    env_ids: list[int], info: dict[str, Any], column: str
) -> None:
    """Not an IndexError from the client's reordering (nor a short column handed on)."""

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=VECTOR_SPEC))))
        rid = server.request_id(conn)
        batch = Batch(
            rid,
            np.zeros((4, 4, 3), np.uint8),
            np.zeros(4),
            np.zeros(4, np.bool_),
            np.zeros(4, np.bool_),
            np.array(env_ids, np.int32),
            info,
        )
        conn.sendall(frame(2, encode(batch)))
        server.read(conn)

    server = Forger(script)
    with (
        VectorSessionClient(
            server.url, 4, compression=None, shared_memory=False, timeout=10 * UNIT
        ) as envs,
        pytest.raises(ProtocolError, match=rf"column {column}"),
    ):
        envs.reset()
    server.join()


# ------------------------------------------------------------------ the shared region


@pytest.mark.skipif(not shared_memory_supported(), reason="shared memory needs Linux memfds")
def test_the_shared_region_holds_no_more_than_the_clients_limit() -> None:
    """An array in a half of the region is copied out: a half is at most max_frame_size."""
    regions = {}
    for limit in (1 << 20, 64 << 20):
        core = ClientCore({}, token=None, max_frame_size=limit)
        core.offer_shared_memory("ws://127.0.0.1:1/ws", True)
        assert core.shared is not None
        regions[limit] = core.shared.size
        core.release()
    assert regions == {1 << 20: FIRST_PAGE + (2 << 20), 64 << 20: DEFAULT_SIZE}


def _with_region(regions: list[ServerRegion]) -> Callable[[bytes], bytes]:
    """A handshake answer that maps the client's offered region (as a server on its
    host does) and says it uses it."""

    def answer(head: bytes) -> bytes:
        offer = next(
            line.split(b":", 1)[1].strip().decode()
            for line in head.split(b"\r\n")
            if line.lower().startswith(HEADER.encode() + b":")
        )
        regions.append(ServerRegion.attach(offer))
        return accept(head)[:-2] + f"{HEADER}: ok\r\n\r\n".encode()

    return answer


@pytest.fixture(params=["C reader", "Python reader"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both readers of results: the C one where built, and the Python reference."""
    if request.param == "C reader":
        if protocol.native_wire is None:
            pytest.skip("openenv_ws._wire is not built here")
    else:  # (as the client modules imported it)
        monkeypatch.setattr("openenv_ws.client._core.native_wire", None)
        monkeypatch.setattr("openenv_ws.client._ws.native_wire", None)
    yield request.param


@pytest.mark.skipif(not shared_memory_supported(), reason="shared memory needs Linux memfds")
@pytest.mark.parametrize("vector", [False, True], ids=["single", "vector"])
def test_a_bool_array_holding_2_in_the_shared_region_is_a_protocol_error(
    reader: str, vector: bool
) -> None:
    shape = (4, 32, 32) if vector else (64, 64)  # 4096 bytes: shared, not inline
    spec: dict[str, Any] = {
        "action": DISCRETE,
        "observation": {"type": "array", "shape": list(shape[vector:]), "dtype": "bool"},
    }
    if vector:
        spec.update(num_envs=4, batch_size=4, autoreset_mode="next_step")
    good = np.zeros(shape, np.bool_)
    bad = np.full(shape, 2, np.uint8).view(np.bool_)
    regions: list[ServerRegion] = []

    def send(conn: socket.socket, obs: np.ndarray[Any, Any]) -> None:
        shared = regions[0].put(obs)
        assert shared is not None
        if not vector:
            server.answer(conn, shared)
            return
        rid = server.request_id(conn)
        ids = np.arange(4, dtype=np.int32)
        flags = np.zeros(4, np.bool_)
        batch = Batch(rid, shared, np.zeros(4), flags, flags, ids, {})
        conn.sendall(frame(2, encode(batch)))

    def script(conn: socket.socket) -> None:
        rid = server.request_id(conn)
        conn.sendall(frame(2, encode(Opened(rid, "s", spec=spec))))
        send(conn, good)
        send(conn, bad)
        server.read(conn)

    server = Forger(script, _with_region(regions))
    client: Any = (
        VectorSessionClient(server.url, 4, compression=None, timeout=10 * UNIT)
        if vector
        else EnvClient(server.url, compression=None, timeout=10 * UNIT, resume=False)
    )
    with client:
        assert regions, "the client offered no shared region"
        first = client.reset()
        assert not np.asarray(first[0] if vector else first.observation).any()
        with pytest.raises(ProtocolError, match="bool array holds bytes other than 0 and 1"):
            client.step([0] * 4 if vector else 0)
    server.join()
    for region in regions:
        region.close()
