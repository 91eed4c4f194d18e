"""Comparing structured values (SPEC section 22) as a client got them with what the
environment made: the same keys in the same order, arrays of the same dtype and elements,
scalars of the same type."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assert_same_value"]


def assert_same_value(got: Any, want: Any) -> None:
    if isinstance(want, np.ndarray):
        assert type(got) is np.ndarray and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same_value(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same_value(g, w)
    else:
        assert type(got) is type(want) and got == want
