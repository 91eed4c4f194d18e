"""Compressed observations, sans-I/O (SPEC section 19): the golden vectors, and the
packer and unpacker against each other on odd arrays and damaged payloads."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws.errors import ProtocolError
from openenv_ws.wire.compress import (
    CODECS,
    EXT_COMPRESSED,
    ObsPacker,
    ObsUnpacker,
    available_codecs,
    choose,
    mode_name,
)
from openenv_ws.wire.decode import compressed_ext_hook, decode_server_frame, ext_hook
from openenv_ws.wire.encode import encode
from openenv_ws.wire.frames import Result
from openenv_ws.wire.native import encode_result

from ..protocol.vectorlib import assert_same, value, vectors

V = vectors()


def payload_of(hex_value: str) -> bytes:
    """The ext payload of one ext type 3 value (checking that it is one)."""
    ext = msgpack.unpackb(bytes.fromhex(hex_value))
    assert isinstance(ext, msgpack.ExtType) and ext.code == EXT_COMPRESSED
    return bytes(ext.data)


def test_both_codecs_are_installed() -> None:
    assert set(available_codecs()) == set(CODECS)


@pytest.mark.parametrize("entry", V["compressed"], ids=[e["name"] for e in V["compressed"]])
def test_compressed_vectors_decode_in_order(entry: dict[str, Any]) -> None:
    unpacker = ObsUnpacker(entry["codec"], entry["delta"], entry["max_bytes"])
    for item in entry["values"]:
        got = unpacker.unpack(payload_of(item["hex"]))
        assert_same(got, value(item["value"]))
        assert not got.flags.writeable


@pytest.mark.parametrize("entry", V["compressed"], ids=[e["name"] for e in V["compressed"]])
def test_the_packer_reproduces_the_vectors(entry: dict[str, Any]) -> None:
    """The reference packer gives these bytes with this build's libraries (the committed
    bytes do not depend on it; a different library version may compress differently)."""
    packer = ObsPacker(entry["codec"], entry["delta"])
    for item in entry["values"]:
        packed = packer.pack(value(item["value"]))
        assert (packed.head + packed.data).hex() == item["hex"]


@pytest.mark.parametrize(
    "entry", V["compressed_malformed"], ids=[e["name"] for e in V["compressed_malformed"]]
)
def test_malformed_compressed_vectors_are_refused(entry: dict[str, Any]) -> None:
    unpacker = ObsUnpacker(entry["codec"], entry["delta"], entry["max_bytes"])
    for hex_value in entry["before"]:
        unpacker.unpack(payload_of(hex_value))
    with pytest.raises(ProtocolError, match=entry["error"]):
        unpacker.unpack(payload_of(entry["hex"]))


ARRAYS = [
    np.zeros((210, 160), np.uint8),
    np.arange(33600, dtype=np.uint8).reshape(210, 160),
    np.random.default_rng(1).integers(0, 255, (210, 160, 3), dtype=np.uint8),
    np.linspace(-1, 1, 600, dtype=np.float32).reshape(20, 30),
    np.array([[True, False], [False, True]] * 200),
    np.zeros((0, 5), np.int16),
    np.asfortranarray(np.arange(1200, dtype=np.int64).reshape(30, 40)),
    np.arange(1000, dtype=">i4"),
]


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("delta", [False, True])
def test_any_sequence_of_arrays_round_trips(codec: str, delta: bool) -> None:
    """Shapes and dtypes change in the middle of the session: each change is a key frame."""
    packer = ObsPacker(codec, delta)
    unpacker = ObsUnpacker(codec, delta, 1 << 20)
    rng = np.random.default_rng(7)
    sequence = [a for a in ARRAYS for _ in range(3)]
    sequence += [ARRAYS[1] ^ rng.integers(0, 2, ARRAYS[1].shape, dtype=np.uint8) for _ in range(5)]
    for arr in sequence:
        got = unpacker.unpack(_payload(packer.pack(arr)))
        np.testing.assert_array_equal(got, arr)
        assert got.dtype == arr.dtype.newbyteorder("<") and got.shape == arr.shape
    assert packer.totals[0] == sum(a.nbytes for a in sequence)


def _payload(packed: Any) -> bytes:
    return payload_of((packed.head + packed.data).hex())


def test_delta_frames_are_small_and_key_frames_follow_key() -> None:
    packer = ObsPacker("zstd", True)
    unpacker = ObsUnpacker("zstd", True, 33600)
    frame = np.random.default_rng(3).integers(0, 128, (210, 160), dtype=np.uint8)
    first = packer.pack(frame)
    frame[100, 20:30] = 255
    second = packer.pack(frame)
    assert second.nbytes < 100 < first.nbytes
    packer.key()
    third = packer.pack(frame)
    assert third.nbytes > 1000
    # a client that missed the second frame: the key frame puts it right again
    unpacker.unpack(_payload(first))
    np.testing.assert_array_equal(unpacker.unpack(_payload(third)), frame)


def test_a_frame_the_client_missed_is_an_error_naming_both_serials() -> None:
    packer = ObsPacker("lz4", True)
    unpacker = ObsUnpacker("lz4", True, 33600)
    frame = np.zeros((210, 160), np.uint8)
    unpacker.unpack(_payload(packer.pack(frame)))
    frame[0, 0] = 1
    packer.pack(frame)  # lost
    frame[0, 1] = 1
    with pytest.raises(
        ProtocolError, match="delta frame 3 applies to observation 2, but this client holds 1"
    ):
        unpacker.unpack(_payload(packer.pack(frame)))


def test_an_oversize_declaration_is_refused_before_decompressing() -> None:
    packer = ObsPacker("zstd", False)
    big = packer.pack(np.zeros(1 << 22, np.uint8))  # 4 MiB of zeros: a few hundred bytes
    with pytest.raises(ProtocolError, match="declares 4194304 bytes"):
        ObsUnpacker("zstd", False, 33600).unpack(_payload(big))


def test_choose_takes_the_servers_preference_and_ignores_unknown_names() -> None:
    assert choose(["lz4", "zstd"], True, ("zstd", "lz4")) == ("zstd", True)
    assert choose(["brotli", "lz4"], True, ("zstd", "lz4")) == ("lz4", True)
    assert choose(["lz4"], True, ("zstd", "lz4"), allow_delta=False) == ("lz4", False)
    assert choose(["brotli"], True, ("zstd", "lz4")) == (None, False)
    assert choose(["zstd"], False, ()) == (None, False)
    assert mode_name("zstd", True) == "zstd+delta" and mode_name(None, True) is None


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_result_with_a_compressed_obs_encodes_alike_in_c_and_python(codec: str) -> None:
    frame = np.arange(33600, dtype=np.uint8).reshape(210, 160)
    packed = ObsPacker(codec, False).pack(frame)
    info = {"lives": 3, "frame_number": 40}
    fast = encode_result(9, packed, 1.0, False, False, False, info)
    assert fast == encode(Result(9, packed, 1.0, False, False, False, info))  # type: ignore[arg-type]
    hook = compressed_ext_hook(ObsUnpacker(codec, False, 33600))
    got = decode_server_frame(fast, ext_hook=hook)
    assert isinstance(got, Result)
    np.testing.assert_array_equal(got.obs, frame)
    with pytest.raises(
        ProtocolError, match="only valid in server results of a session that negotiated compression"
    ):
        decode_server_frame(fast, ext_hook=ext_hook)
