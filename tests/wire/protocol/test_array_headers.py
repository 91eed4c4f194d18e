"""The array header caches of the step loop: a header learnt once serves arrays of that
dtype and shape, and never an array or payload it does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from openenv_ws._arrays import array_ext_parts, array_ext_payload, decode_array
from openenv_ws.errors import ProtocolError


def _joined(arr: np.ndarray) -> bytes:
    head, data = array_ext_parts(arr)
    return head + bytes(data)


def test_arrays_after_a_cached_header_encode_as_the_first_did() -> None:
    first = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert _joined(first) == _joined(first.copy())  # the second from the cache
    # Same dtype and shape, other layouts and byte order: the same wire bytes.
    for other in (
        np.asfortranarray(first),
        np.repeat(first, 2, axis=0)[::2],
        first.astype(">f4"),
    ):
        assert _joined(other) == _joined(first)
    assert _joined(first[::-1]) == _joined(np.ascontiguousarray(first[::-1]))


def test_a_cached_header_never_serves_another_shape_or_dtype() -> None:
    a = np.zeros((2, 3), np.uint8)
    _joined(a)
    b = np.zeros((3, 2), np.uint8)
    c = np.zeros((2, 3), np.int8)
    assert decode_array(array_ext_payload(b)).shape == (3, 2)
    assert decode_array(array_ext_payload(c)).dtype == np.int8
    empty = np.zeros((0, 3), np.uint8)
    assert decode_array(array_ext_payload(empty)).shape == (0, 3)


def test_decoding_with_a_known_head_still_checks_the_data() -> None:
    arr = np.arange(6, dtype=np.uint16).reshape(2, 3)
    payload = array_ext_payload(arr)
    np.testing.assert_array_equal(decode_array(payload), arr)
    np.testing.assert_array_equal(decode_array(payload), arr)  # the head now known
    with pytest.raises(ProtocolError, match="needs 12 data bytes"):
        decode_array(payload[:-2])
    with pytest.raises(ProtocolError, match="needs 12 data bytes"):
        decode_array(payload + b"\x00")
    assert not decode_array(payload).flags.writeable


def test_bool_arrays_are_checked_every_time() -> None:
    good = array_ext_payload(np.array([True, False, True]))
    np.testing.assert_array_equal(decode_array(good), [True, False, True])
    bad = good[:-1] + b"\x02"
    with pytest.raises(ProtocolError, match="bool array holds bytes other than 0 and 1"):
        decode_array(bad)
    big = array_ext_payload(np.ones(5000, bool))  # (checked another way above 4096 bytes)
    assert decode_array(big).all()
    with pytest.raises(ProtocolError, match="bool array holds bytes other than 0 and 1"):
        decode_array(big[:-1] + b"\xff")
