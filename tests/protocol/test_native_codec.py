"""The server's C reader of step requests and writer of results against the reference codec.

``native_wire.parse_step`` must accept exactly the steps that the reference
decoder reads as a step in the canonical layout with an action in 0..127
(and give the same values), and ``native_wire.pack_result`` must write
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
    from openenv_ws.server import _session

    if os.environ.get("CI"):
        assert wire is not None, "openenv_ws._wire was not built; is gcc missing?"
    assert native.parse_step is wire.parse_step
    assert protocol.parse_step is wire.parse_step
    assert _session.parse_step is wire.parse_step


# ---------------------------------------------------------------------------- step requests

ids = st.integers(0, 2**32 - 1)
steps = st.builds(protocol.encode_step, ids, st.integers(-300, 300), st.booleans())


def _reference_step(data: bytes) -> tuple[int, int, bool] | None:
    """The fields of `data` by the reference decoder if it is a step with an action
    in 0..127, else None."""
    try:
        frame = protocol.decode_client_frame(data)
    except ProtocolError:
        return None
    if type(frame) is not protocol.Step or type(frame.action) is not int:
        return None
    return (frame.id, frame.action, frame.obs) if 0 <= frame.action <= 127 else None


def _canonical(fields: tuple[int, int, bool] | None, data: bytes) -> bool:
    return fields is not None and protocol.encode(protocol.Step(*fields)) == data


def step_reader_agrees(got: tuple[int, int, bool] | None, data: bytes) -> bool:
    """Whether `got`, the C reader's answer for `data`, is right by the reference codec:
    the values the reference decodes, or None where `data` is not a canonical
    step with an action in 0..127 (an id in a wider form than needed may be read)."""
    want = _reference_step(data)
    if got is None:
        return not _canonical(want, data)
    return got == want and [type(v) for v in got] == [int, int, bool]


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
    assert step_reader_agrees(wire.parse_step(frame), frame)


def test_the_c_step_reader_declines_steps_in_other_forms() -> None:
    plain = protocol.encode_step(300, 5, False)
    assert wire.parse_step(plain) == (300, 5, False)
    others = {
        "an action above 127": protocol.encode_step(1, 128, True),
        "a negative action": protocol.encode_step(1, -1, True),
        "a float action": protocol.encode_step(1, 1.0, True),
        "keys in another order": b"\x84\xa2id\x01\xa2op\xa4step\xa6action\x01\xa3obs\xc3",
        "a byte after the map": plain + b"\xc0",
    }
    for name, data in others.items():
        assert wire.parse_step(data) is None, name
        assert not _canonical(_reference_step(data), data), name
    # An id in a wider form than needed is still read, as the reference reads it.
    wide = plain.replace(b"\xcd\x01\x2c", b"\xce\0\0\x01\x2c")
    assert wire.parse_step(wide) == _reference_step(wide) == (300, 5, False)


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
