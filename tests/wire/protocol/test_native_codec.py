"""The server's C reader of step requests and writer of results against the reference codec.

``native_wire.parse_step`` must accept every step in the canonical layout
(an action in 0..127 as the int, any other as the bytes of its value, which
``protocol.parse_step`` reads as the reference reads them: same values, or
None where the reference refuses), and ``native_wire.pack_result`` must write
exactly the bytes of the reference encoder or decline (None), for every
input, odd ones included.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES, array_ext_parts
from openenv_ws._shm import SharedArray
from openenv_ws.errors import ProtocolError
from openenv_ws.wire import native
from openenv_ws.wire.encode import thread_pack

from .test_protocol_properties import _outcome, arrays, client_frames, damaged

wire = protocol.native_wire
pytestmark = pytest.mark.skipif(wire is None, reason="openenv_ws._wire is not built here")


def test_the_server_uses_the_c_reader_where_it_is_built() -> None:
    from openenv_ws.server.session import server_session as _session

    if os.environ.get("CI"):
        assert wire is not None, "openenv_ws._wire was not built; is gcc missing?"
    assert native.parse_step is not native._no_reader
    assert protocol.parse_step is native.parse_step
    assert _session.parse_step is native.parse_step


# ---------------------------------------------------------------------------- agreement


def same(a: Any, b: Any) -> bool:
    """`a` and `b` are the same decoded value: types, map key order, array bytes,
    NaN and all."""
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return bool(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list or type(a) is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float:
        return a == b or (a != a and b != b)
    return bool(a == b)


def tagged(code: int, data: bytes) -> Any:
    """An extension hook that keeps every extension's type and bytes (in a uint8 array,
    which the checks take wherever an array may be)."""
    return np.frombuffer(bytes((code & 0xFF,)) + data, np.uint8)


# ---------------------------------------------------------------------------- step requests

ids = st.integers(0, 2**32 - 1)
steps = st.builds(protocol.encode_step, ids, st.integers(-300, 300), st.booleans())


def _reference_step(data: bytes) -> tuple[int, Any, bool] | None:
    """The fields of `data` by the reference decoder if it is a step, else None."""
    try:
        frame = protocol.decode_client_frame(data)
    except ProtocolError:
        return None
    if type(frame) is not protocol.Step:
        return None
    return (frame.id, frame.action, frame.obs)


def _canonical(fields: tuple[int, Any, bool] | None, data: bytes) -> bool:
    return fields is not None and protocol.encode(protocol.Step(*fields)) == data


def step_reader_agrees(data: bytes) -> bool:
    """Whether the readers' answers for `data` are right by the reference codec.

    The C reader's: an action in 0..127 as the int, any other as the bytes of
    its value; None only where `data` is not a step in the canonical layout.
    ``protocol.parse_step``'s: the reference's values (the action's bytes read
    by ``decode_field``), or None where the reference refuses the action.
    """
    raw, got, want = wire.parse_step(data), native.parse_step(data), _reference_step(data)
    if raw is None:
        return got is None and not _canonical(want, data)
    if type(raw[1]) is int:
        if not (0 <= raw[1] <= 127 and got == raw):
            return False
    elif type(raw[1]) is not bytes or (got is not None and got[::2] != raw[::2]):
        return False
    if got is None:
        return want is None
    return want is not None and same(got, want) and type(got[2]) is bool


# ---------------------------------------------------------------------------- results


def _reference_result(payload: bytes) -> tuple[Any, ...] | None:
    try:
        frame = protocol.decode_server_frame(payload, ext_hook=tagged)
    except ProtocolError:
        return None
    if type(frame) is not protocol.Result:
        return None
    flags = (frame.terminated, frame.truncated, frame.done)
    return (frame.id, frame.obs, frame.reward, *flags, frame.info)


def result_reader_agrees(got: tuple[Any, ...] | None, payload: bytes) -> bool:
    """Whether the C result reader's answer `got` for `payload` is right: None (it may
    decline), or the reference decoder's fields, a structured observation read from
    its bytes by ``decode_field`` (which refuses only what the reference refuses)."""
    if got is None:
        return True
    status, rid, code, data, reward, *flags, info = got
    want = _reference_result(payload)
    try:
        if code == native.STRUCTURED:
            obs = protocol.decode_field(data, protocol.Result, "obs", rid, tagged)
        else:
            obs = None if code == 0 else tagged(code, data)
    except ProtocolError:
        return want is None
    return status == wire.OK and same((rid, obs, reward, *flags, info), want)


@settings(max_examples=400, deadline=None)
@given(ids, st.integers(0, 127), st.booleans())
def test_the_c_step_reader_reads_every_step_a_client_sends(
    rid: int, action: int, obs: bool
) -> None:
    assert wire.parse_step(protocol.encode_step(rid, action, obs)) == (rid, action, obs)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.binary(max_size=40), steps, client_frames.map(protocol.encode)), st.data())
def test_the_c_step_reader_accepts_what_the_reference_reads_as_a_plain_step(
    data: bytes, draw: st.DataObject
) -> None:
    frame = damaged(data, draw)
    assert step_reader_agrees(frame)


def test_the_c_step_reader_declines_steps_in_other_forms() -> None:
    plain = protocol.encode_step(300, 5, False)
    assert wire.parse_step(plain) == (300, 5, False)
    others = {
        "keys in another order": b"\x84\xa2id\x01\xa2op\xa4step\xa6action\x01\xa3obs\xc3",
        "a byte after the map": plain + b"\xc0",
        "an action nesting 9 levels": protocol.encode_step(1, 5, True).replace(
            b"action\x05", b"action" + b"\x91" * 9 + b"\x05"
        ),
        "an action holding 0xc1": protocol.encode_step(1, 5, True).replace(
            b"action\x05", b"action\x92\x01\xc1"
        ),
        "an action map with an int key": protocol.encode_step(1, 5, True).replace(
            b"action\x05", b"action\x81\x01\x02"
        ),
    }
    for name, data in others.items():
        assert wire.parse_step(data) is None, name
        assert not _canonical(_reference_step(data), data), name
        assert step_reader_agrees(data), name
    # An id in a wider form than needed is still read, as the reference reads it.
    wide = plain.replace(b"\xcd\x01\x2c", b"\xce\0\0\x01\x2c")
    assert wire.parse_step(wide) == _reference_step(wide) == (300, 5, False)


@pytest.mark.parametrize(
    "action",
    [128, -1, 300, 1.5, "a text", [1, 2], {"message": "hi", "n": [1, {"x": None}]}, 2**64 - 1],
)
def test_any_other_action_comes_as_its_bytes_and_reads_as_the_reference_reads_it(
    action: Any,
) -> None:
    data = protocol.encode_step(9, action, True)
    raw = wire.parse_step(data)
    assert raw is not None and type(raw[1]) is bytes
    assert data.endswith(raw[1] + b"\xa3obs\xc3")
    assert same(native.parse_step(data), (9, action, True))
    assert step_reader_agrees(data)


def test_an_action_the_reference_refuses_is_left_to_it() -> None:
    base = protocol.encode_step(4, 5, True)
    for bad in (b"\x81\xc4\x01k\x01", b"\xd4\x02\x00", b"\xa1\xff", b"\xc3", b"\xc0"):
        data = base.replace(b"action\x05", b"action" + bad)
        assert native.parse_step(data) is None, bad
        with pytest.raises(ProtocolError):
            protocol.decode_client_frame(data)
        assert step_reader_agrees(data)


def test_an_array_action_reads_as_the_reference_reads_it() -> None:
    action = np.arange(6, dtype=np.float32).reshape(2, 3)
    data = protocol.encode_step(3, action, False)
    got = native.parse_step(data)
    assert got is not None and same(got, _reference_step(data))
    assert got[1].dtype == np.float32 and got[1].shape == (2, 3)


def test_the_c_step_reader_takes_bytes_only() -> None:
    frame = protocol.encode_step(7, 3, True)
    assert wire.parse_step(frame) == (7, 3, True)
    for other in (bytearray(frame), memoryview(frame), frame.decode("latin-1"), None):
        assert wire.parse_step(other) is None


# ---------------------------------------------------------------------------- results


def reference_result(*fields: Any) -> Any:
    """The reference encoder's bytes for these result fields, or its error."""
    return _outcome(lambda: protocol.encode(protocol.Result(*fields)))


edge_ints = st.sampled_from(
    [
        0,
        1,
        31,
        32,
        127,
        128,
        255,
        256,
        65535,
        65536,
        2**32 - 1,
        2**32,
        2**63 - 1,
        2**63,
        2**64 - 1,
        2**64,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32768,
        -32769,
        -(2**31),
        -(2**31) - 1,
        -(2**63),
        -(2**63) - 1,
    ]
)
texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "x" * 31, "x" * 32, "é" * 200, "y" * 255, "z" * 256, "w" * 70_000]),
    st.just("\ud800"),  # a lone surrogate: not UTF-8
)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**65),
    edge_ints,
    st.floats(),
    texts,
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(np.int64, st.integers(-5, 5)),
    st.builds(np.float64, st.floats(allow_nan=False)),
)
infos = st.one_of(
    st.dictionaries(texts, values, max_size=20),
    st.dictionaries(st.integers(0, 3), st.integers(), max_size=2),
    st.just({f"k{i}": i for i in range(70)}),  # a map 16 header
    st.lists(st.integers(), max_size=2),
)
shared = st.builds(
    SharedArray,
    st.integers(4096, 2**40),
    st.sampled_from(sorted(DTYPE_CODES.values())),
    st.lists(st.integers(0, 70_000), max_size=3).map(tuple),
)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(ids, st.integers(-1, 2**33), st.booleans(), st.floats(0, 3)),
    st.one_of(
        st.none(),
        shared,
        arrays(max_dims=3),
        st.integers(0, 3),
        # Structured observations (SPEC section 22), odd ones too.
        st.text(max_size=8) | st.just("\ud800"),
        st.dictionaries(
            st.text(max_size=3),
            arrays(max_dims=2) | st.integers(-(2**64), 2**65) | st.text(max_size=8),
            max_size=3,
        ),
        st.lists(arrays(max_dims=1) | st.floats() | st.just("\ud800"), max_size=3),
    ),
    st.one_of(st.floats(), st.integers(-3, 3)),
    st.one_of(st.booleans(), st.integers(0, 1)),
    st.booleans(),
    st.booleans(),
    infos,
)
def test_the_result_writer_writes_the_reference_bytes(
    rid: Any, obs: Any, reward: Any, terminated: Any, truncated: bool, done: bool, info: Any
) -> None:
    """encode_result (C where it can, else the reference) and the C writer alone."""
    fields = (rid, obs, reward, terminated, truncated, done, info)
    want = reference_result(*fields)
    assert _outcome(lambda: protocol.encode_result(*fields)) == want
    if obs is None or type(obs) is SharedArray:
        head = b"\xc0" if obs is None else obs.ext_payload()  # any bytes: spliced as they are
        packed = wire.pack_result(rid, head, b"", reward, terminated, truncated, done, info)
        if packed is not None and obs is None:
            assert packed == want


def test_the_c_result_writer_splices_the_observation_as_given() -> None:
    head, data = array_ext_parts(np.arange(5000, dtype=np.uint8))
    info = {"lives": 3, "frame_number": 123456}
    packed = wire.pack_result(9, head, data, -1.5, False, True, True, info)
    want = reference_result(9, np.arange(5000, dtype=np.uint8), -1.5, False, True, True, info)
    assert packed == want


def test_the_c_result_writer_takes_the_step_loops_results() -> None:
    """A frame of pixels, a reward and an info of scalars are written in C, not declined."""
    obs = np.zeros((210, 160, 3), np.uint8)
    info = {"lives": 3, "episode_frame_number": 4000, "frame_number": 12000}
    head, data = array_ext_parts(obs)
    assert wire.pack_result(70_000, head, data, 1.0, False, False, False, info) is not None
    assert protocol.encode_result(70_000, obs, 1.0, False, False, False, info) == reference_result(
        70_000, obs, 1.0, False, False, False, info
    )


def test_the_c_result_writer_takes_structured_observations() -> None:
    """A map observation (an OpenEnv model's dump) is packed first, then written in C."""
    obs = {"echoed_message": "hello", "message_length": 5, "pixels": np.ones((2, 3), np.uint8)}
    head = thread_pack()(obs)
    assert wire.pack_result(12, head, b"", 0.5, False, False, False, {}) is not None
    assert protocol.encode_result(12, obs, 0.5, False, False, False, {}) == reference_result(
        12, obs, 0.5, False, False, False, {}
    )
