"""Indexed colour frames (SPEC section 18): palette indices on the wire, RGB for the user.

An Atari frame is 210x160 palette indices that the emulator expands to RGB,
three times the bytes. A session opened with ``palette`` gets the indices and
the palette instead, and the client expands them: a third of the bytes to
move between processes or hosts, and the server's emulator skips the
conversion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["NATIVE", "PALETTE_BYTES", "expand", "expanded", "indexed_shape"]

#: Size of a palette on the wire: 256 RGB triples.
PALETTE_BYTES = 768


def _numpy_expand(indices: Any, palette: bytes, out: Any) -> None:
    table = np.frombuffer(palette, np.uint8).reshape(256, 3)
    src = np.asarray(indices, np.uint8).reshape(-1)
    np.take(table, src, axis=0, out=np.asarray(out).reshape(-1, 3))


#: expand(indices, palette, out): write the colour of each index of `indices` into
#: `out` (shape ``indices.shape + (3,)``); both C-contiguous uint8, `palette`
#: :data:`PALETTE_BYTES` bytes. The C loop (with AVX-512 byte permutes where
#: the CPU has them: ~5 us a frame against ~10; openenv-ws bench --scenarios expand),
#: or numpy (~75 us) where the package was installed without a C compiler.
expand: Callable[[Any, bytes, Any], None]
try:
    from ._expand import expand  # type: ignore[no-redef]
except ImportError:
    expand = _numpy_expand

#: True when the C expander is built (the clients ask for indexed frames only then).
NATIVE = expand is not _numpy_expand


def indexed_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape of the indices of RGB observations of `shape`; None if not ``(..., 3)``."""
    return shape[:-1] if len(shape) >= 1 and shape[-1] == 3 else None


def expanded(indices: np.ndarray[Any, Any], palette: bytes) -> np.ndarray[Any, Any]:
    """A new RGB array for `indices`."""
    src = np.ascontiguousarray(indices, np.uint8)
    out = np.empty((*src.shape, 3), np.uint8)
    expand(src, palette, out)
    return out
