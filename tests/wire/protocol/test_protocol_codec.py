"""Codec behaviour beyond the vectors: limits, allocation, encode-side refusals, schemas."""

from __future__ import annotations

import importlib.util
import struct
import sys
import threading
import tracemalloc
from dataclasses import fields
from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws import protocol
from openenv_ws._arrays import array_ext_parts, array_ext_payload
from openenv_ws.errors import PayloadTooBig, ProtocolError
from openenv_ws.wire import checks
from openenv_ws.wire.checks import Kind

from .spec_tables import op_fields


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _step_with_array(payload: bytes) -> bytes:
    ext = struct.pack(">BIb", 0xC9, len(payload), 1) + payload
    return (
        b"\x84"
        + _pack("op")
        + _pack("step")
        + _pack("id")
        + _pack(1)
        + _pack("action")
        + ext
        + _pack("obs")
        + _pack(True)
    )


@pytest.mark.parametrize(
    "shape, data",
    [
        ([2**32 - 1, 2**32 - 1], b"\x00"),
        ([2**32 - 1] * 16, b""),
        ([0] + [2**32 - 1] * 15, b""),
        ([2**31, 2**31, 4], bytes(16)),
    ],
)
def test_absurd_shapes_fail_without_allocating(shape: list[int], data: bytes) -> None:
    frame = _step_with_array(struct.pack(f"<BB{len(shape)}I", 1, len(shape), *shape) + data)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match=r"data bytes|too large to exist"):
            protocol.decode_client_frame(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"decoding a refused shape allocated {peak} bytes"


def test_size_limit_is_checked_before_decoding() -> None:
    garbage = b"\xc1" * 65  # not MessagePack at all: the size is what gets refused
    with pytest.raises(PayloadTooBig) as info:
        protocol.decode_client_frame(garbage, max_frame_size=64)
    assert (info.value.size, info.value.limit, info.value.code) == (65, 64, "too_big")
    with pytest.raises(ProtocolError) as info2:
        protocol.decode_client_frame(garbage, max_frame_size=65)
    assert info2.value.code == "bad_frame"


def test_default_limits() -> None:
    big = protocol.encode(protocol.Restore(id=1, snapshot=bytes(protocol.DEFAULT_MAX_FRAME_SIZE)))
    with pytest.raises(PayloadTooBig):
        protocol.decode_client_frame(big)
    assert (
        protocol.decode_server_frame(
            protocol.encode(protocol.SnapshotData(id=1, snapshot=bytes(4 << 20)))
        ).id
        == 1
    )
    assert protocol.DEFAULT_MAX_FRAME_SIZE == 1 << 20
    assert protocol.DEFAULT_MAX_SERVER_FRAME_SIZE == 64 << 20


def test_memoryview_size_counts_bytes_not_items() -> None:
    data = protocol.encode(protocol.Step(id=1, action=1))
    padded = data + b"\x00" * ((-len(data)) % 4)
    wide = memoryview(padded).cast("I")  # len() counts 4-byte items
    with pytest.raises(PayloadTooBig):
        protocol.decode_client_frame(wide, max_frame_size=len(wide) + 1)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_buffer_decodes(kind: Any) -> None:
    frame = protocol.Step(id=9, action=np.arange(4, dtype=np.int16))
    got = protocol.decode_client_frame(kind(protocol.encode(frame)))
    assert isinstance(got, protocol.Step) and got.action.tolist() == [0, 1, 2, 3]


def test_decoded_arrays_are_read_only_views() -> None:
    frame = protocol.Result(id=1, obs=np.zeros((3, 2), np.uint8), reward=0.0)
    got = protocol.decode_server_frame(protocol.encode(frame))
    assert isinstance(got, protocol.Result) and got.obs is not None
    assert not got.obs.flags.writeable and not got.obs.flags.owndata


def test_depth_limit_in_maps_and_lists() -> None:
    def nested(levels: int) -> Any:
        value: Any = 1
        for i in range(levels):
            value = {"k": value} if i % 2 else [value]
        return value

    ok = protocol.Open(id=1, config={"a": nested(7)})
    assert protocol.decode_client_frame(protocol.encode(ok)) == ok
    deep = protocol.encode(protocol.Open(id=1, config={"a": nested(8)}))
    with pytest.raises(ProtocolError, match="deeper than 8 levels") as info:
        protocol.decode_client_frame(deep)
    assert (info.value.code, info.value.request_id) == ("bad_request", 1)
    info_bomb = protocol.encode(protocol.Result(id=2, reward=0.0, info={"x": nested(50)}))
    with pytest.raises(ProtocolError, match="field 'info' nests"):
        protocol.decode_server_frame(info_bomb)


def test_unknown_fields_may_nest_deeper_than_free_form_values() -> None:
    raw = {"op": "close", "id": 3, "x-extension": [[[[[[[[[[[1]]]]]]]]]]]}
    assert protocol.decode_client_frame(_pack(raw)) == protocol.Close(id=3)


def test_nested_bin_key_in_config_is_a_bad_frame() -> None:
    raw = {"op": "open", "id": 1, "version": 1, "config": {"a": {b"k": 1}}}
    with pytest.raises(ProtocolError, match="map key of type bytes") as info:
        protocol.decode_client_frame(_pack(raw))
    assert info.value.code == "bad_frame"


def test_invalid_utf8_in_a_map_key() -> None:
    data = b"\x83\xa2op\xa5close\xa2id\x01\xa2\xff\xfe\x01"
    with pytest.raises(ProtocolError, match="not valid UTF-8"):
        protocol.decode_client_frame(data)


def test_error_frames_take_a_nil_id_only_there() -> None:
    nil_error = protocol.encode(protocol.error_frame(None, "text_frame", "binary only"))
    got = protocol.decode_server_frame(nil_error)
    assert got == protocol.Error(id=None, code="text_frame", message="binary only", fatal=True)
    with pytest.raises(ProtocolError, match="frame id must be an integer"):
        protocol.encode(protocol.Closed(id=None))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the step loop's frames


def test_each_frame_declares_every_field_for_the_wire_in_order() -> None:
    """The decoder passes fields by position, the encoder writes them in this order."""
    for cls in (*protocol.CLIENT_OPS.values(), *protocol.SERVER_OPS.values()):
        wired = protocol.wire_fields(cls)
        assert [f.name for f in wired] == [f.name for f in fields(cls)][1:], cls.OP
        assert all(isinstance(f.kind, Kind) for f in wired), cls.OP
        # Each call gives fresh containers: no two frames share a default map or list.
        assert all(
            a.default is not b.default
            for a, b in zip(wired, protocol.wire_fields(cls), strict=True)
            if type(a.default) in (dict, list)
        )


def test_the_c_tier_takes_the_declared_step_and_result() -> None:
    """A field added to ``step`` or ``result`` in frames.py turns the C tier off (the
    reference codec serves those frames, correctly but slower) until the C readers and
    writers (``openenv_ws/_wire_read.c``, ``_wire_write.c``) learn it: this says so."""
    if importlib.util.find_spec("openenv_ws._wire") is None:
        pytest.skip("openenv_ws._wire is not built here")
    assert protocol.native_wire is not None, "the C readers do not know the declared frames"


@pytest.mark.parametrize(
    "section, ops",
    [("## 4. Client ops", protocol.CLIENT_OPS), ("## 5. Server ops", protocol.SERVER_OPS)],
)
def test_the_spec_lists_the_declared_fields(section: str, ops: dict[str, Any]) -> None:
    """SPEC's field tables name each frame's fields in wire order, required as declared."""
    want = {
        op: [(f.name, f.required) for f in protocol.wire_fields(cls)] for op, cls in ops.items()
    }
    assert op_fields(section) == want


def test_each_kind_has_its_own_name() -> None:
    """The browser codec finds a kind's check by its name."""
    kinds = [v for v in vars(checks).values() if isinstance(v, Kind)]
    assert len({kind.name for kind in kinds}) == len(kinds)


def test_a_result_decodes_alike_in_every_valid_form() -> None:
    base = {
        "op": "result", "id": 5, "obs": None, "reward": 1.5, "terminated": False,
        "truncated": False, "done": False, "info": {"lives": 2},
    }  # fmt: skip
    want = protocol.Result(id=5, reward=1.5, info={"lives": 2})
    variants = [
        base,
        {**base, "reward": 2},  # integer reward
        {**base, "extra": 1},  # unknown field
        {k: v for k, v in base.items() if k != "info"},  # optional field absent
        {k: v for k, v in base.items() if k != "obs"},
        {**base, "info": None},
    ]
    for raw in variants:
        got = protocol.decode_server_frame(_pack(raw))
        assert isinstance(got, protocol.Result) and type(got.reward) is float
        assert got.id == want.id and got.obs is None
    with pytest.raises(ProtocolError, match="'info' nests"):
        protocol.decode_server_frame(_pack({**base, "info": {"a": [[[[[[[[[1]]]]]]]]]}}))
    with pytest.raises(ProtocolError, match="field 'terminated' must be a boolean, got int 0"):
        protocol.decode_server_frame(_pack({**base, "terminated": 0}))


def test_a_step_decodes_alike_in_every_valid_form() -> None:
    for raw, want in [
        ({"op": "step", "id": 1, "action": 3, "obs": True}, protocol.Step(1, 3, True)),
        ({"op": "step", "id": 1, "action": 3}, protocol.Step(1, 3, True)),
        ({"op": "step", "id": 1, "action": 3, "obs": False, "z": 0}, protocol.Step(1, 3, False)),
        ({"op": "step", "id": 1, "action": 0.5, "obs": True}, protocol.Step(1, 0.5, True)),
    ]:
        assert protocol.decode_client_frame(_pack(raw)) == want
    with pytest.raises(ProtocolError, match="'action'"):
        protocol.decode_client_frame(_pack({"op": "step", "id": 1, "action": None, "obs": True}))


# --------------------------------------------------------------------------- encode side


@pytest.mark.parametrize(
    "frame, message",
    [
        (protocol.Step(id=-1, action=0), "frame id must be an integer in 0..4294967295, got -1"),
        (protocol.Step(id=2**32, action=0), "got 4294967296"),
        (protocol.Step(id=True, action=0), "got True"),
        (
            protocol.Result(id=1, reward=float("nan")),
            "field 'reward' of a 'result' frame cannot be encoded: it is NaN",
        ),
        (
            protocol.Result(id=1, reward=0.0, info={"o": object()}),
            "field 'info' of a 'result' frame cannot be encoded: values of type object",
        ),
        (
            protocol.Result(id=1, reward=0.0, info={"n": 2**70}),
            "cannot be encoded: integer 1180591620717411303424 is outside the 64-bit range",
        ),
        (protocol.Step(id=1, action=np.zeros(2, np.complex64)), "dtype complex64 cannot be sent"),
        (protocol.Step(id=1, action=np.zeros((1,) * 17)), "17 dimensions cannot be sent"),
        (
            protocol.Reset(id=1, episode_id="\ud800"),
            "field 'episode_id' of a 'reset' frame cannot be encoded",
        ),
        (
            protocol.Result(id=1, reward=0.0, info={"a": np.zeros(2, object)}),
            "dtype object cannot be sent",
        ),
    ],
)
def test_encode_refuses_what_v1_cannot_carry(frame: Any, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        protocol.encode(frame)
    assert message in str(info.value)


def test_encode_normalises_numpy_and_python_values() -> None:
    frame = protocol.Result(
        id=np.uint32(7).item(),
        obs=np.zeros(2, ">u2"),
        reward=np.float32(0.5),  # type: ignore[arg-type]
        info={"t": (1, 2), "s": {3}, "f": np.float32(0.25), "i": np.int64(-3), "b": np.bool_(True)},
    )
    got = protocol.decode_server_frame(protocol.encode(frame))
    assert isinstance(got, protocol.Result)
    assert got.reward == 0.5 and type(got.reward) is float
    assert got.info == {"t": [1, 2], "s": [3], "f": 0.25, "i": -3, "b": True}
    assert got.obs is not None and got.obs.dtype == np.dtype("<u2")


def test_nested_and_top_level_arrays_encode_alike() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    head, body = array_ext_parts(arr)
    nested = msgpack.packb(msgpack.ExtType(1, array_ext_payload(arr)))
    assert nested == head + bytes(body)


@pytest.mark.parametrize(
    "info",
    [
        {"lives": np.arange(8, dtype=np.int32), "flag": np.ones(8, np.bool_)},
        {f"k{i}": np.full(i, i, np.uint16) for i in range(15)},  # fixmap, the longest
        {f"k{i}": np.zeros((2, i), ">f4") for i in range(16)},  # map16, big-endian arrays
        {"a": np.arange(3), **{f"k{i}": i for i in range(0xFFFF)}},  # map32
        {1: np.arange(6)[::2], "nested": {"a": np.arange(2.0)}, "s": "t", "e": np.zeros((0, 3))},
    ],
    ids=["arrays", "fixmap-15", "map16", "map32", "mixed"],
)
def test_a_map_field_encodes_as_the_packer_packs_it(info: dict[Any, Any]) -> None:
    # A map whose first value is an array is spliced in without the packer's hook: the
    # bytes must not change.
    packed = msgpack.Packer(default=_as_ext, use_bin_type=True).pack(info)
    empty = protocol.encode(protocol.Result(id=1, reward=0.0, info={}))
    assert empty.endswith(b"\x80")  # info is the last field
    assert protocol.encode(protocol.Result(id=1, reward=0.0, info=info)) == empty[:-1] + packed


def _as_ext(obj: Any) -> Any:
    assert isinstance(obj, np.ndarray)
    return msgpack.ExtType(1, array_ext_payload(obj))


def test_frame_fields_order() -> None:
    fields = protocol.frame_fields(protocol.Result(id=3, reward=1.0))
    assert list(fields) == ["op", "id", "obs", "reward", "terminated", "truncated", "done", "info"]
    assert fields["op"] == "result"


@pytest.mark.parametrize(
    "reward, message",
    [(True, "got bool"), ("1.0", "got str"), (None, "got NoneType"), ([1.0], "got list")],
)
def test_reward_must_be_a_number(reward: Any, message: str) -> None:
    with pytest.raises(ProtocolError, match=f"field 'reward' .*must be a number, {message}"):
        protocol.encode(protocol.Result(id=1, reward=reward))


def test_encode_is_safe_across_threads() -> None:
    """Packing calls back into Python for numpy values; threads must not share a buffer."""
    frames = [
        protocol.Result(
            id=i, reward=float(i), info={"a": np.float32(i), "b": np.arange(i % 7), "c": "x" * i}
        )
        for i in range(64)
    ]
    expected = [protocol.encode(f) for f in frames]
    errors: list[str] = []

    def work() -> None:
        try:
            for _ in range(50):
                for frame, want in zip(frames, expected, strict=True):
                    if protocol.encode(frame) != want:
                        errors.append(f"frame {frame.id} encoded differently")
                        return
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
