"""Shared-memory observations for clients on the server's host (SPEC section 17).

Real servers, real memfds: the clients offer a region in the handshake and
the server writes observations into it; every offer the server must not
trust is refused (one reason for every descriptor that does not qualify),
and the session then works inline.
"""

from __future__ import annotations

import fcntl
import os
import struct
from typing import Any

import msgpack
import numpy as np
import pytest

from atari import AtariEnvironment, atari_factory
from openenv_ws import ProtocolError
from openenv_ws._shm import (
    EXT_SHARED,
    FIRST_PAGE,
    HEADER,
    UNUSABLE,
    ClientRegion,
    ServerRegion,
    SharedArray,
    shared_memory_supported,
)
from openenv_ws.client import EnvClient, VectorEnvClient
from openenv_ws.protocol import Open, Opened, Reset, Result, Step, decode_server_frame, encode
from openenv_ws.testing import FakeEnvironment

from ..._rawwire import RawWS
from .conftest import UNIT, serve
from .proxy import CutProxy

pytestmark = pytest.mark.skipif(
    not shared_memory_supported(), reason="shared memory needs Linux memfds"
)

BIG = {"obs_shape": [48, 40, 3], "episode_length": 10_000}  # 5,760 bytes: over the threshold


def _mapped_regions() -> int:
    with open("/proc/self/maps") as maps:
        return sum("memfd:openenv-ws-obs" in line for line in maps)


def _raw_with_offer(url: str, offer: str) -> tuple[RawWS, str]:
    """A frame-level connection whose handshake carries `offer`; (ws, the server's answer)."""
    ws = RawWS.to(url, timeout=5 * UNIT, headers={HEADER: offer})
    return ws, ws.headers.get(HEADER, "")


def _ext_codes(payload: bytes) -> list[int]:
    codes: list[int] = []

    def hook(code: int, data: bytes) -> Any:
        codes.append(code)
        return None

    msgpack.unpackb(payload, ext_hook=hook, raw=False)
    return codes


def _step_replies(ws: RawWS, config: dict[str, Any], steps: int) -> list[bytes]:
    ws.send(encode(Open(id=1, config=config)))
    assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)
    ws.send(encode(Reset(id=2, seed=0)))
    replies = [ws.read_frame(5 * UNIT)[1]]
    for i in range(steps):
        ws.send(encode(Step(id=3 + i, action=i % 4)))
        replies.append(ws.read_frame(5 * UNIT)[1])
    return replies


def test_the_client_reads_observations_from_shared_memory_bit_for_bit() -> None:
    local = AtariEnvironment({"game": "breakout"})
    with serve(atari_factory) as server:
        with EnvClient(server.url, config={"game": "breakout"}) as env:
            assert env.shared_memory_used
            r = env.reset(seed=7)
            np.testing.assert_array_equal(r.observation, local.reset(seed=7).obs)
            kept = [r.observation]
            for i in range(40):
                r = env.step(i % 4)
                want = local.step(i % 4)
                np.testing.assert_array_equal(r.observation, want.obs)
                assert r.reward == want.reward and r.info == want.info
                kept.append(r.observation)
            # Observations are copies: later steps never change earlier ones.
            assert not r.observation.flags.writeable
            assert any(not np.array_equal(kept[0], k) for k in kept[1:])
            np.testing.assert_array_equal(kept[0], local.reset(seed=7).obs)
        with EnvClient(server.url, config={"game": "breakout"}, shared_memory=False) as env:
            assert not env.shared_memory_used
            np.testing.assert_array_equal(env.reset(seed=7).observation, kept[0])
    assert _mapped_regions() == 0, "a region stayed mapped after its session ended"


def test_results_carry_ext_type_2_and_small_arrays_stay_inline() -> None:
    region = ClientRegion()
    try:
        with serve() as server:
            ws, answer = _raw_with_offer(server.url, region.offer())
            with ws:
                assert answer == "ok"
                replies = _step_replies(ws, BIG, 3)
            assert all(_ext_codes(r) == [EXT_SHARED] for r in replies)
            local = FakeEnvironment(BIG)
            hook_frames = [
                decode_server_frame(r, ext_hook=lambda c, d: region.read(d)) for r in replies
            ]
            assert isinstance(hook_frames[-1], Result)
            # Only the last reply is still intact (each reply reuses the half before last).
            expected = local.reset(seed=0).obs
            for i in range(3):
                expected = local.step(i % 4).obs
            np.testing.assert_array_equal(hook_frames[-1].obs, expected)
            ws, answer = _raw_with_offer(server.url, region.offer())
            with ws:  # 16-byte observations: cheaper inline
                assert answer == "ok"
                assert all(_ext_codes(r) == [1] for r in _step_replies(ws, {}, 2))
    finally:
        region.close()


def _memfd(name: str, size: int, *, seal: bool) -> int:
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def test_untrustworthy_offers_are_refused_and_the_session_works_inline(tmp_path: Any) -> None:
    nonce = os.urandom(16)
    plain = os.open(tmp_path / "plain", os.O_RDWR | os.O_CREAT)
    os.write(plain, nonce + bytes(1 << 16))
    unsealed = _memfd("openenv-ws-obs", 1 << 20, seal=False)
    tiny = _memfd("openenv-ws-obs", FIRST_PAGE, seal=True)
    other = _memfd("something-else", 1 << 20, seal=True)
    longer = _memfd("openenv-ws-obsX", 1 << 20, seal=True)
    for fd in (unsealed, tiny, other, longer):
        os.pwrite(fd, nonce, 0)
    good = ClientRegion()
    pid = os.getpid()
    malformed = "refused: the offer is not '<pid> <fd> <32 hex digits>'"
    # Whatever the descriptor is, the answer is the same: it tells nothing about files.
    offers = {
        "garbage": malformed,
        f"{pid} {good.fd} {good.nonce.hex()[:-1]}": malformed,
        f"{pid} {plain} {nonce.hex()}": f"refused: {UNUSABLE}",
        f"{pid} {other} {nonce.hex()}": f"refused: {UNUSABLE}",
        f"{pid} {longer} {nonce.hex()}": f"refused: {UNUSABLE}",
        f"{pid} {unsealed} {nonce.hex()}": f"refused: {UNUSABLE}",
        f"{pid} {tiny} {nonce.hex()}": f"refused: {UNUSABLE}",
        f"{pid} {good.fd} {os.urandom(16).hex()}": f"refused: {UNUSABLE}",
        f"{pid} 99999 {nonce.hex()}": f"refused: {UNUSABLE}",
        f"4000000000 {good.fd} {good.nonce.hex()}": f"refused: {UNUSABLE}",
    }
    try:
        with serve() as server:
            for offer, expected in offers.items():
                ws, answer = _raw_with_offer(server.url, offer)
                with ws:
                    assert answer == expected, offer
                    replies = _step_replies(ws, BIG, 2)
                    assert all(_ext_codes(r) == [1] for r in replies), offer
    finally:
        good.close()
        for fd in (plain, unsealed, tiny, other, longer):
            os.close(fd)


def test_shared_arrays_are_refused_where_they_do_not_belong() -> None:
    ref = SharedArray(FIRST_PAGE, 1, (4, 4))
    frame = encode(Result(id=1, obs=ref, reward=0.0))  # type: ignore[arg-type]
    assert _ext_codes(frame) == [EXT_SHARED]
    with pytest.raises(ProtocolError, match="extension type 2"):
        decode_server_frame(frame)  # no region on this connection
    region = ClientRegion(FIRST_PAGE + 2 * 4096)
    try:
        outside = SharedArray(region.size - 8, 1, (4, 4)).ext_payload()
        with pytest.raises(ProtocolError, match="outside"):
            region.read(outside)
        with pytest.raises(ProtocolError, match="after its shape"):
            region.read(ref.ext_payload() + b"\x00")
        with pytest.raises(ProtocolError, match="dtype code 99"):
            region.read(struct.pack("<Q", FIRST_PAGE) + b"\x63\x00")
    finally:
        region.close()
    # Requests never carry shared arrays: a client frame with ext 2 is malformed.
    with serve() as server, RawWS.to(server.url) as ws:
        ws.send(msgpack.packb({"op": "open", "id": 1, "version": 1, "x": msgpack.ExtType(2, b"")}))
        error = decode_server_frame(ws.until_close(5 * UNIT)[0][0])
        assert error.code == "bad_frame"  # type: ignore[union-attr]


def test_a_resumed_session_keeps_using_shared_memory() -> None:
    local = AtariEnvironment({"game": "pong"})
    with serve(atari_factory) as server, CutProxy(server.port) as proxy:
        with EnvClient(proxy.url, config={"game": "pong"}, resume_timeout=10 * UNIT) as env:
            assert env.shared_memory_used
            np.testing.assert_array_equal(env.reset(seed=3).observation, local.reset(seed=3).obs)
            for i in range(30):
                if i in (10, 20):
                    proxy.cut()
                r = env.step(i % 6)
                np.testing.assert_array_equal(r.observation, local.step(i % 6).obs)
            assert env.shared_memory_used
        assert proxy.cuts == 2


def test_vector_sessions_use_shared_memory_and_match_in_process() -> None:
    n = 3
    locals_ = [FakeEnvironment(BIG) for _ in range(n)]
    with serve() as server:
        # Without resumption no later connection offers a region: the descriptors go.
        with VectorEnvClient(server.url, n, config=BIG, resume=False) as envs:
            cores = [slot.core for slot in envs._slots]
            assert all(core.shared is not None and core.shared.fd == -1 for core in cores)
        with VectorEnvClient(server.url, n, config=BIG) as envs:
            # Kept for a resumed session's new connection to offer again.
            cores = [slot.core for slot in envs._slots]
            assert all(core.shared is not None and core.shared.fd >= 0 for core in cores)
            obs, _ = envs.reset(seed=[1, 2, 3])
            for i, env in enumerate(locals_):
                np.testing.assert_array_equal(obs[i], env.reset(seed=i + 1).obs)
            for t in range(5):
                actions = np.array([(t + i) % 4 for i in range(n)])
                obs, *_ = envs.step(actions)
                for i, env in enumerate(locals_):
                    np.testing.assert_array_equal(obs[i], env.step(int(actions[i])).obs)
    assert _mapped_regions() == 0


def test_a_client_out_of_descriptors_for_a_region_still_plays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def exhausted(*args: Any) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "memfd_create", exhausted)
    local = FakeEnvironment(BIG)
    with serve() as server, EnvClient(server.url, config=BIG) as env:
        assert not env.shared_memory_used
        np.testing.assert_array_equal(env.reset(seed=5).observation, local.reset(seed=5).obs)


def test_the_server_reuses_one_view_per_half_and_names_it_without_copying() -> None:
    client = ClientRegion()
    server = ServerRegion.attach(client.offer())
    try:
        layout = ((210, 160, 3), np.dtype(np.uint8))
        first, second, third = (server.reserve(layout) for _ in range(3))
        assert first is not None and second is not None
        assert third is first and second is not first  # the halves take turns
        # An equal layout that is another object finds the same slots.
        assert server.reserve(((210, 160, 3), np.dtype(np.uint8))) is second
        frames = []
        for slot in (server.reserve(layout), server.reserve(layout)):
            assert slot is not None
            view = slot.view
            view[...] = np.random.default_rng(len(frames)).integers(0, 255, view.shape)
            assert slot.name.shape == (210, 160, 3)
            np.testing.assert_array_equal(client.read(slot.name.ext_payload()), view)
            frames.append(slot.name)
        assert sorted(f.offset for f in frames)[0] == FIRST_PAGE
        assert frames[0].offset != frames[1].offset
        # An array written elsewhere is copied into the next half.
        other = np.arange(5000, dtype=np.int32)
        copied = server.put(other)
        assert copied is not None and copied.offset == frames[0].offset
        np.testing.assert_array_equal(client.read(copied.ext_payload()), other)
        # Too small to be worth it, or not in the wire's byte order: no slot.
        assert server.reserve(((4, 4), np.dtype(np.uint8))) is None
        assert server.reserve(((64, 64), np.dtype(">u4"))) is None
        assert server.reserve(layout) is not None  # the cached layout still serves
        del first, second, third, slot, view
    finally:
        server.close()
        client.close()
    assert server._map.closed  # cached views do not keep the mapping alive


def test_a_region_closes_while_an_array_still_views_it() -> None:
    client = ClientRegion()
    server = ServerRegion.attach(client.offer())
    shared = server.put(np.arange(8192, dtype=np.uint8))
    assert shared is not None
    payload = msgpack.packb(shared.ext())[3:]  # the ext 16's payload
    kept = client.view(payload)
    client.close()  # (the view keeps the mapping: closing it would raise BufferError)
    server.close()
    assert kept[:4].tolist() == [0, 1, 2, 3] and kept[-1] == 255
    del kept, client, server  # the last holders of the mapping
    assert _mapped_regions() == 0
