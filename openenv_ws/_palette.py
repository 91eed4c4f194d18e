"""Indexed colour frames (SPEC section 18): palette indices on the wire, RGB for the user.

An Atari frame is 210x160 palette indices that the emulator expands to RGB,
three times the bytes. A session opened with ``palette`` gets the indices and
the palette instead, and the client expands them: a third of the bytes to
move between processes or hosts, and the server's emulator skips the
conversion.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NATIVE", "PALETTE_BYTES", "expand", "expanded", "indexed_shape"]

#: Size of a palette on the wire: 256 RGB triples.
PALETTE_BYTES = 768

try:
    from ._expand import expand as _native_expand
except ImportError:  # built without a C compiler: numpy does it, about 7x slower
    _native_expand = None

#: True when the C expander is built (the clients ask for indexed frames only then).
NATIVE = _native_expand is not None


def _numpy_expand(indices: Any, palette: bytes, out: Any) -> None:
    table = np.frombuffer(palette, np.uint8).reshape(256, 3)
    src = np.asarray(indices, np.uint8).reshape(-1)
    np.take(table, src, axis=0, out=np.asarray(out).reshape(-1, 3))


def expand(indices: np.ndarray[Any, Any], palette: bytes, out: np.ndarray[Any, Any]) -> None:
    """Write the colour of each index of `indices` into `out` (shape ``indices.shape + (3,)``).

    Both arrays are C-contiguous uint8; `palette` holds :data:`PALETTE_BYTES` bytes.
    """
    if _native_expand is not None:
        _native_expand(indices, palette, out)
    else:
        _numpy_expand(indices, palette, out)


def indexed_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape of the indices of RGB observations of `shape`; None if not ``(..., 3)``."""
    return shape[:-1] if len(shape) >= 1 and shape[-1] == 3 else None


def expanded(indices: np.ndarray[Any, Any], palette: bytes) -> np.ndarray[Any, Any]:
    """A new RGB array for `indices`."""
    src = np.ascontiguousarray(indices, np.uint8)
    out = np.empty((*src.shape, 3), np.uint8)
    expand(src, palette, out)
    return out
