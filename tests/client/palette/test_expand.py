"""The palette expander: the C loop and the numpy fallback write the same bytes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from openenv_ws import palette
from openenv_ws.palette import PALETTE_BYTES, expand, expanded, indexed_shape

RNG = np.random.default_rng(7)
PALETTE = RNG.integers(0, 256, PALETTE_BYTES, dtype=np.uint8).tobytes()


def reference(indices: np.ndarray, palette: bytes) -> np.ndarray:
    """Element [..., c] is palette[3 * index + c], written out the slow way."""
    table = np.frombuffer(palette, np.uint8).reshape(256, 3)
    return table[indices.astype(np.intp)]


def test_the_c_expander_is_built_where_a_compiler_is() -> None:
    # `pip install -e .` compiles it on this machine kind; CI must test the C path.
    if os.environ.get("CI") == "true":
        assert palette.NATIVE, "openenv_ws._expand was not built; is gcc missing?"
    elif not palette.NATIVE:
        pytest.skip("openenv_ws._expand is not built here (no C compiler at install)")


LENGTHS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 127, 128, 129, 191, 192, 193, 33_599, 33_600]


@pytest.mark.parametrize("n", LENGTHS)
def test_every_length_expands_like_the_reference(n: int) -> None:
    # Lengths around the 4-pixel blocks of the portable loop, the 64-pixel
    # blocks of the vector one, and their tails.
    indices = RNG.integers(0, 256, n, dtype=np.uint8)
    out = np.full((n, 3), 0xAA, np.uint8)
    expand(indices, PALETTE, out)
    np.testing.assert_array_equal(out, reference(indices, PALETTE))


@pytest.mark.skipif(not palette.NATIVE, reason="the C module's two kernels")
@pytest.mark.parametrize("n", LENGTHS)
def test_the_portable_c_loop_writes_what_the_vector_one_writes(n: int) -> None:
    from openenv_ws._expand import expand as native

    indices = RNG.integers(0, 256, n, dtype=np.uint8)
    vector, portable = np.full((2, n, 3), 0x55, np.uint8)
    native(indices, PALETTE, vector)
    native(indices, PALETTE, portable, True)
    np.testing.assert_array_equal(portable, reference(indices, PALETTE))
    np.testing.assert_array_equal(vector, portable)


@pytest.mark.skipif(not palette.NATIVE, reason="the C module's kernel choice")
def test_the_vector_kernel_runs_where_the_cpu_has_it() -> None:
    from openenv_ws import _expand

    with open("/proc/cpuinfo") as f:
        flags = next((line.split() for line in f if line.startswith("flags")), [])
    want = "avx512vbmi" if {"avx512f", "avx512bw", "avx512vbmi"} <= set(flags) else "portable"
    assert want == _expand.KERNEL


def test_the_numpy_fallback_writes_the_same_bytes() -> None:
    indices = RNG.integers(0, 256, (210, 160), dtype=np.uint8)
    native = expanded(indices, PALETTE)
    fallback = np.empty_like(native)
    palette._numpy_expand(indices, PALETTE, fallback)
    np.testing.assert_array_equal(fallback, native)
    np.testing.assert_array_equal(native, reference(indices, PALETTE))


def test_all_256_codes_and_a_batch_of_frames() -> None:
    codes = np.arange(256, dtype=np.uint8).repeat(5).reshape(16, 80)
    batch = np.stack([codes, codes[::-1].copy()])
    out = expanded(batch, PALETTE)
    assert out.shape == (2, 16, 80, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, reference(batch, PALETTE))


@pytest.mark.skipif(not palette.NATIVE, reason="checks the C module's argument errors")
def test_the_c_expander_names_bad_arguments() -> None:
    from openenv_ws._expand import expand as native

    indices = np.zeros(8, np.uint8)
    with pytest.raises(ValueError, match=r"768 bytes .* got 767"):
        native(indices, PALETTE[:-1], np.empty(24, np.uint8))
    with pytest.raises(ValueError, match="out holds 23 bytes; 8 indices expand to 24"):
        native(indices, PALETTE, np.empty(23, np.uint8))
    with pytest.raises(ValueError, match="C-contiguous"):
        native(np.zeros(16, np.uint8)[::2], PALETTE, np.empty(24, np.uint8))
    with pytest.raises(TypeError):
        native(indices, PALETTE, b"\x00" * 24)  # read-only output


def test_indexed_shape_drops_the_colour_axis() -> None:
    assert indexed_shape((210, 160, 3)) == (210, 160)
    assert indexed_shape((210, 160)) is None
    assert indexed_shape((128,)) is None
    assert indexed_shape(()) is None
