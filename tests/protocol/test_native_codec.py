"""The server's C reader of step requests and writer of results against the Python ones.

``native_wire.parse_step`` must accept exactly the bytes ``parse_step`` accepts,
and ``native_wire.pack_result`` must write exactly the bytes the Python encoder
writes or decline (None), for every input, odd ones included.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES
from openenv_ws._shm import SharedArray

from .test_protocol_properties import _outcome, damaged

wire = protocol.native_wire
pytestmark = pytest.mark.skipif(wire is None, reason="openenv_ws._wire is not built here")


def test_the_server_uses_the_c_reader_where_it_is_built() -> None:
    from openenv_ws.server import _session

    if os.environ.get("CI"):
        assert wire is not None, "openenv_ws._wire was not built; is gcc missing?"
    assert _session._read_step is (protocol.parse_step if wire is None else wire.parse_step)


# ---------------------------------------------------------------------------- step requests

ids = st.integers(0, 2**32 - 1)
steps = st.builds(protocol.encode_step, ids, st.integers(-300, 300), st.booleans())


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=40), steps), st.data())
def test_the_c_step_reader_accepts_what_the_python_one_accepts(
    data: bytes, draw: st.DataObject
) -> None:
    frame = damaged(data, draw)
    got = wire.parse_step(frame)
    assert got == protocol.parse_step(frame)
    assert got is None or [type(v) for v in got] == [int, int, bool]


def test_the_c_step_reader_takes_bytes_only() -> None:
    frame = protocol.encode_step(7, 3, True)
    assert wire.parse_step(frame) == (7, 3, True)
    for other in (bytearray(frame), memoryview(frame), frame.decode("latin-1"), None):
        assert wire.parse_step(other) is None
        assert protocol.parse_step(other) is None  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- results


@contextlib.contextmanager
def python_only() -> Iterator[None]:
    """The protocol module's encoders without the C writer."""
    protocol.native_wire = None
    try:
        yield
    finally:
        protocol.native_wire = wire


def python_result(*fields: Any) -> Any:
    with python_only():
        return _outcome(lambda: protocol.encode_result(*fields))


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
    st.one_of(st.none(), shared),
    st.one_of(st.floats(), st.integers(-3, 3)),
    st.one_of(st.booleans(), st.integers(0, 1)),
    st.booleans(),
    st.booleans(),
    infos,
)
def test_the_c_result_writer_writes_the_python_bytes_or_declines(
    rid: Any, obs: Any, reward: Any, terminated: Any, truncated: bool, done: bool, info: Any
) -> None:
    fields = (rid, obs, reward, terminated, truncated, done, info)
    want = python_result(*fields)
    assert _outcome(lambda: protocol.encode_result(*fields)) == want
    head = b"\xc0" if obs is None else obs.ext_payload()  # any bytes: spliced as they are
    packed = wire.pack_result(rid, head, b"", reward, terminated, truncated, done, info)
    if packed is not None and obs is None:
        assert packed == want


def test_the_c_result_writer_splices_the_observation_as_given() -> None:
    head, data = protocol.array_ext_parts(np.arange(5000, dtype=np.uint8))
    info = {"lives": 3, "frame_number": 123456}
    packed = wire.pack_result(9, head, data, -1.5, False, True, True, info)
    want = python_result(9, np.arange(5000, dtype=np.uint8), -1.5, False, True, True, info)
    assert packed == want
