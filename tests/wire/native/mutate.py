"""Seeded mutation of valid frames, for fuzzing the C readers against the Python ones.

:func:`fuzz` feeds a check mutants of its seed inputs: cut short, bits
flipped, bytes set to MessagePack markers, length fields overwritten with
edge and oversized values, odd or nested MessagePack values spliced in,
chunks dropped or repeated, seeds spliced together. Each run draws from one
seed (``OPENENV_WS_FUZZ_SEED``, default 19), so a failure names what replays
it. An ordinary test run tries a few hundred mutants per reader;
``OPENENV_WS_FUZZ_SECONDS`` (the sanitized run sets it) keeps each fuzz
going that many seconds instead.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence

#: Mutants per reader in an ordinary run.
QUICK_CASES = 300

# Values a length, id or count field is most likely to be mishandled at.
EDGES = (0, 1, 0x7D, 0x7E, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0xFFFFFFFF,
         2**32, 2**63 - 1, 2**63, 2**64 - 1)  # fmt: skip
# Bytes that change a MessagePack value's type or a frame header's meaning.
MARKERS = (0x00, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3, 0xC4,
           0xC7, 0xC9, 0xCA, 0xCB, 0xCC, 0xCF, 0xD0, 0xD3, 0xD4, 0xD8, 0xD9, 0xDA, 0xDB,
           0xDC, 0xDD, 0xDE, 0xDF, 0xE0, 0xFF)  # fmt: skip
# MessagePack values a reader may not expect: huge declared sizes, nesting, extensions.
ODD_VALUES = (
    b"\xdd\xff\xff\xff\xff",  # array 32 of 2**32-1 items
    b"\xdf\xff\xff\xff\xff",  # map 32
    b"\xdb\xff\xff\xff\xff",  # str 32
    b"\xc6\x7f\xff\xff\xff",  # bin 32
    b"\xc9\xff\xff\xff\xff\x01",  # ext 32 of type 1
    b"\xc7\x05\x02abc",  # ext 8, cut short
    b"\xd8\x01" + bytes(16),  # fixext 16
    b"\xd4\xff\x00",  # fixext 1 of type -1 (a timestamp's type)
    b"\x91" * 40 + b"\xc0",  # arrays nested 40 deep
    b"\x81\xa1k" * 20 + b"\xc0",  # maps nested 20 deep
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x01",  # a NaN
    b"\xca\xff\x80\x00\x00",  # float 32 minus infinity
    b"\xa3\xff\xfe\xfd",  # a str that is not UTF-8
    b"\xc1",  # the byte MessagePack never uses
)


def _seed() -> int:
    return int(os.environ.get("OPENENV_WS_FUZZ_SEED", "19"))


def _seconds() -> float:
    return float(os.environ.get("OPENENV_WS_FUZZ_SECONDS", "0"))


def mutate(data: bytes, seeds: Sequence[bytes], rng: random.Random) -> bytes:
    """`data` after one to three random mutations."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(out))
        kind = rng.randrange(9)
        if kind == 0:
            del out[at:]
        elif kind == 1 and out:
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(out))
                out[i] ^= 1 << rng.randrange(8)
        elif kind == 2 and out:
            out[min(at, len(out) - 1)] = rng.choice(MARKERS)
        elif kind == 3:
            width = rng.choice((1, 2, 4, 8))
            value = rng.choice(EDGES) % (1 << (8 * width))
            out[at : at + width] = value.to_bytes(width, "big")
        elif kind == 4:
            out[at:at] = rng.choice(ODD_VALUES)
        elif kind == 5:
            del out[at : at + rng.randint(1, 16)]
        elif kind == 6:
            out[at:at] = out[at : at + rng.randint(1, 32)]
        elif kind == 7:
            out[at:] = rng.randbytes(rng.randint(0, 24))
        else:
            other = rng.choice(seeds)
            out[at:] = other[rng.randint(0, len(other)) :]
    return bytes(out)


def fuzz(
    name: str,
    seeds: Sequence[bytes],
    check: Callable[[bytes, random.Random], None],
    *,
    max_size: int = 1 << 20,
) -> int:
    """Run `check` on the seeds, then on mutants of them; the number of inputs checked.

    `check` gets the input and a random source for any other choice it makes.
    The first failure is re-raised as an AssertionError naming the seed, the
    case and the input.
    """
    base = _seed()
    deadline = time.monotonic() + _seconds()
    rng = random.Random(f"{name}:{base}")
    case = 0
    while case < len(seeds) + QUICK_CASES or time.monotonic() < deadline:
        if case < len(seeds):
            data = seeds[case]
        else:
            data = mutate(rng.choice(seeds), seeds, rng)[:max_size]
        try:
            check(data, random.Random(f"{name}:{base}:{case}"))
        except Exception as exc:
            raise AssertionError(
                f"{name}: case {case} of OPENENV_WS_FUZZ_SEED={base} failed on "
                f"{len(data)} bytes {data[:200].hex()}{'...' if len(data) > 200 else ''}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        case += 1
    return case
