"""Codec cost of a ``result`` frame holding one Atari RGB frame (210x160x3 uint8).

Times, in one process, the protocol's ``encode`` and ``decode_server_frame``
(the public codec of :mod:`openenv_ws.protocol`, C speedups included) and the
reference: plain ``msgpack.packb``/``unpackb`` of a map holding the same
100,800 bytes as ``bin``. Each row is the median of many batches in
microseconds per call, with our cost as a ratio of the reference's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from ..measure import median_us
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

COLUMNS = [
    Column("path", "call"),
    Column("ours_us", "openenv-ws µs", ".2f"),
    Column("reference_us", "msgpack raw µs", ".2f"),
    Column("vs_reference", "vs reference", ".2f"),
]


@scenario("codec", "Codec: an RGB result frame", default=False)
def run(ctx: Context) -> Section:
    """``encode``/``decode_server_frame`` of an RGB result vs plain msgpack of the same map."""
    from openenv_ws.protocol import Result, decode_server_frame, encode

    section = Section("codec", "Codec: an RGB result frame", COLUMNS)
    ctx.progress.start(section.title, 2)
    frame = np.random.default_rng(ctx.options.seed).integers(
        0, 256, size=(210, 160, 3), dtype=np.uint8
    )
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
    if (
        not isinstance(decoded, Result)
        or decoded.obs is None
        or not np.array_equal(decoded.obs, frame)
    ):
        raise AssertionError("the codec did not give back the frame it encoded")
    # --steps calls in all, as batches of 50.
    number = 50
    repeats = max(3, ctx.options.steps // number)
    calls: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("encode", lambda: encode(result), lambda: msgpack.packb(raw_map)),
        ("decode", lambda: decode_server_frame(wire), lambda: msgpack.unpackb(raw_wire)),
    ]
    for name, ours, reference in calls:
        ctx.progress.phase(name)
        ours_us = median_us(ours, repeats, number)
        ref_us = median_us(reference, repeats, number)
        section.add(path=name, ours_us=ours_us, reference_us=ref_us, vs_reference=ours_us / ref_us)
    section.notes.append(
        f"result frame, 210x160x3 uint8 obs: {len(wire)} bytes (reference map: "
        f"{len(raw_wire)}); median of {repeats} batches of {number} calls."
    )
    return section
