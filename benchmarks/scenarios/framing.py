"""Per-frame cost of the RFC 6455 framer against websockets' sans-I/O protocol.

Times, in one process, :mod:`openenv_ws.wire.framing` (``parse_head``,
``apply_mask``, ``frame_head``, ``serialize``, called as the server and the
clients call them) and the reference: websockets' own ``Protocol`` in the OPEN
state with no size limit (``receive_data``/``events_received`` to read a
frame, ``send_binary``/``data_to_send`` to build one). For a small and a large
binary message, four rows:

- ``read masked (server)``: a client's frame, unmasked into bytes;
- ``read unmasked (client)``: a server's frame, its payload copied out as
  bytes (as the async client does; websockets gives a bytearray; the sync
  client takes a memoryview of its buffer instead, no copy);
- ``build unmasked (server)``: header and payload as one bytes
  (``frame_head(...) + data``, what the server writes for a small result);
- ``build masked (client)``: ``serialize(..., mask=True)``, a fresh random key
  per frame on both sides.

Before timing, both sides must read the same payload and build frames that
carry it (byte for byte when unmasked). Each row is the median of many
batches in microseconds per call, with our cost as a ratio of the reference's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ..measure import median_us
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

#: Binary message sizes: a small step message and a large one (16-bit length field).
SIZES = (60, 30_000)
COLUMNS = [
    Column("size", "message bytes"),
    Column("path", "frame"),
    Column("ours_us", "openenv-ws µs", ".3f"),
    Column("reference_us", "websockets µs", ".3f"),
    Column("vs_reference", "ratio", ".2f"),
]


@scenario("framing", "Framing: openenv-ws framer vs websockets", default=False)
def run(ctx: Context) -> Section:
    """Reading and building masked/unmasked binary frames vs websockets' sans-I/O Protocol."""
    from websockets.protocol import Protocol, Side, State

    from openenv_ws.wire import framing as F

    section = Section("framing", "Framing: openenv-ws framer vs websockets", COLUMNS)
    ctx.progress.start(section.title, 4 * len(SIZES))
    rng = random.Random(ctx.options.seed)
    # --steps calls per contender and row, as batches of 50.
    number = 50
    repeats = max(3, ctx.options.steps // number)

    def protocol(side: Side) -> Protocol:
        return Protocol(side, state=State.OPEN, max_size=None)

    for size in SIZES:
        data = rng.randbytes(size)
        masked = F.serialize(F.OP_BINARY, data, mask=True)
        plain = F.serialize(F.OP_BINARY, data, mask=False)
        server, client = protocol(Side.SERVER), protocol(Side.CLIENT)

        # websockets gives a payload as bytes or bytearray, and a frame as one write.
        def ws_read_masked(server: Protocol = server, masked: bytes = masked) -> Any:
            server.receive_data(masked)
            events: list[Any] = server.events_received()
            (frame,) = events
            return frame.data

        def ws_read_plain(client: Protocol = client, plain: bytes = plain) -> Any:
            client.receive_data(plain)
            events: list[Any] = client.events_received()
            (frame,) = events
            return frame.data

        def ws_build_server(server: Protocol = server, data: bytes = data) -> bytes:
            server.send_binary(data)
            (frame,) = server.data_to_send()
            return frame

        def ws_build_client(client: Protocol = client, data: bytes = data) -> bytes:
            client.send_binary(data)
            (frame,) = client.data_to_send()
            return frame

        def our_read_masked(masked: bytes = masked) -> bytes:
            head = F.parse_head(masked, 0, len(masked), True, None)
            assert head is not None
            _, start, stop = head
            with memoryview(masked) as view:
                return F.apply_mask(view[start:stop], masked[start - 4 : start])

        def our_read_plain(plain: bytes = plain) -> bytes:
            head = F.parse_head(plain, 0, len(plain), False, None)
            assert head is not None
            _, start, stop = head
            with memoryview(plain) as view:
                return bytes(view[start:stop])

        def our_build_server(data: bytes = data) -> bytes:
            return F.frame_head(F.OP_BINARY, len(data)) + data

        def our_build_client(data: bytes = data) -> bytes:
            return F.serialize(F.OP_BINARY, data, mask=True)

        # Both sides read the same payload, from their own frames and from the other's.
        for name, got in (
            ("websockets reading a masked frame", ws_read_masked()),
            ("websockets reading an unmasked frame", ws_read_plain()),
            ("openenv-ws reading a masked frame", our_read_masked()),
            ("openenv-ws reading an unmasked frame", our_read_plain()),
            ("websockets reading its own masked frame", ws_read_masked(masked=ws_build_client())),
            ("websockets reading our masked frame", ws_read_masked(masked=our_build_client())),
            ("openenv-ws reading its own masked frame", our_read_masked(masked=our_build_client())),
            (
                "openenv-ws reading websockets' masked frame",
                our_read_masked(masked=ws_build_client()),
            ),
            (
                "openenv-ws reading websockets' unmasked frame",
                our_read_plain(plain=ws_build_server()),
            ),
        ):
            if got != data:
                raise AssertionError(f"{size} B: {name} did not give the payload sent")
        if not our_build_server() == ws_build_server() == plain:
            raise AssertionError(f"{size} B: the unmasked frames of both sides differ")

        calls: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
            ("read masked (server)", our_read_masked, ws_read_masked),
            ("read unmasked (client)", our_read_plain, ws_read_plain),
            ("build unmasked (server)", our_build_server, ws_build_server),
            ("build masked (client)", our_build_client, ws_build_client),
        ]
        for name, ours, reference in calls:
            ctx.progress.phase(f"{size} B: {name}")
            ours_us = median_us(ours, repeats, number)
            ref_us = median_us(reference, repeats, number)
            section.add(
                size=size,
                path=name,
                ours_us=ours_us,
                reference_us=ref_us,
                vs_reference=ours_us / ref_us,
            )
    section.notes.append(
        f"one binary message per frame, final, no extensions; median of {repeats} batches "
        f"of {number} calls per contender and row; ratio: openenv-ws / websockets "
        "(below 1: ours is cheaper). The server writes results of 2 KiB and more as "
        "header and payload apart (no join); the sync client reads a payload as a "
        "memoryview of its buffer (no copy)."
    )
    return section
