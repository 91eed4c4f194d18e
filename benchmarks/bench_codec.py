"""Codec cost of a ``result`` frame holding one Atari RGB frame (210x160x3 uint8).

Measures, in one run, protocol v1's ``encode``/``decode_server_frame`` and the
reference: plain ``msgpack.packb``/``unpackb`` of a map holding the same
100,800 bytes as ``bin``. Prints the median of many repeats in microseconds
and our cost as a ratio of the reference's.

    python benchmarks/bench_codec.py [--repeats N] [--number K]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from openenv_ws.protocol import Result, decode_server_frame, encode


def _median_us(fn: Callable[[], Any], repeats: int, number: int) -> float:
    """Median over `repeats` batches of the per-call time of `fn`, in microseconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200, help="batches to take the median of")
    parser.add_argument("--number", type=int, default=50, help="calls per batch")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, size=(210, 160, 3), dtype=np.uint8)
    info = {"lives": 3, "episode_frame_number": 4000, "frame_number": 12000}
    result = Result(id=42, obs=frame, reward=1.0, info=info)
    wire = encode(result)

    raw_map = {
        "op": "result",
        "id": 42,
        "obs": frame.tobytes(),
        "reward": 1.0,
        "terminated": False,
        "truncated": False,
        "done": False,
        "info": info,
    }
    raw_wire = msgpack.packb(raw_map)

    decoded = decode_server_frame(wire)
    assert isinstance(decoded, Result) and decoded.obs is not None
    assert np.array_equal(decoded.obs, frame)

    r, n = args.repeats, args.number
    rows = [
        (
            "encode",
            _median_us(lambda: encode(result), r, n),
            _median_us(lambda: msgpack.packb(raw_map), r, n),
        ),
        (
            "decode",
            _median_us(lambda: decode_server_frame(wire), r, n),
            _median_us(lambda: msgpack.unpackb(raw_wire), r, n),
        ),
    ]
    print(f"result frame, 210x160x3 uint8 obs: {len(wire)} bytes (reference map: {len(raw_wire)})")
    print(f"median of {r} x {n} calls")
    print(f"{'':8}{'openenv-ws µs':>15}{'msgpack raw µs':>16}{'ratio':>8}")
    for name, ours, ref in rows:
        print(f"{name:8}{ours:15.2f}{ref:16.2f}{ours / ref:8.2f}")


if __name__ == "__main__":
    main()
