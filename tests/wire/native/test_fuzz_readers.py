"""Mutation fuzz of every C reader against the Python reference.

Each reader gets valid frames and mutants of them (see :mod:`.mutate`): its
answer must be the Python reader's, or a clean decline (None, FALLBACK, a
Python exception), never a crash. An ordinary run tries a few hundred
mutants per reader against the regular build; ``.ci/lib/sanitize.sh`` runs
the same tests for longer against a build with AddressSanitizer and
UndefinedBehaviorSanitizer, which turn any read out of bounds or undefined
behaviour into a failed run. Inputs that the readers read from a buffer are
handed over in buffers of exactly their size (numpy arrays), so that a read
past the end leaves the allocation.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import struct
from typing import Any

import numpy as np
import pytest

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES
from openenv_ws._shm import SharedArray
from openenv_ws.protocol import encode_result
from openenv_ws.wire.framing import FrameError, apply_mask, parse_head

from ..._rawwire import frame_bytes
from ..protocol.test_native_codec import result_reader_agrees, step_reader_agrees
from .mutate import fuzz

wire: Any = protocol.native_wire
pytestmark = pytest.mark.skipif(wire is None, reason="openenv_ws._wire is not built here")


def test_the_c_readers_are_built_in_ci() -> None:
    if os.environ.get("CI") or os.environ.get("OPENENV_WS_NATIVE_BUILD"):
        assert wire is not None, "openenv_ws._wire was not built; is gcc missing?"


def exact(data: bytes) -> np.ndarray[Any, Any]:
    """`data` in an allocation of its own and of its size, unlike bytes' trailing NUL."""
    return np.frombuffer(data, np.uint8).copy()


# ---------------------------------------------------------------------------- step requests

STEPS = [
    protocol.encode_step(rid, action, obs)
    for rid in (0, 127, 128, 255, 256, 65535, 65536, protocol.MAX_ID)
    for action in (0, 5, 127, 128, -1, 300)
    for obs in (True, False)
]


def test_the_step_reader_takes_what_the_reference_reads_as_a_plain_step() -> None:
    def check(data: bytes, _: random.Random) -> None:
        assert step_reader_agrees(data)

    fuzz("parse_step", STEPS, check)


# ---------------------------------------------------------------------------- results

INFOS: list[dict[str, Any]] = [
    {},
    {"lives": 3, "frame": 1 << 40, "neg": -(2**63), "big": 2**64 - 1, "small": -5},
    {"ok": True, "no": False, "none": None, "x": 0.25, "name": "pong", "long": "é" * 300},
    {f"k{i}": i for i in range(40)},
]
OBSERVATIONS: list[Any] = [
    None,
    np.arange(7, dtype=np.uint8),
    np.zeros((3, 4), np.int16),
    np.arange(300, dtype=np.uint8),
    SharedArray(4096, DTYPE_CODES["uint8"], (210, 160, 3)),
    # structured (SPEC section 22)
    "a text observation",
    {"echoed_message": "hello", "message_length": 5, "pos": np.arange(3, dtype=np.float32)},
    [1, -2.5, None, True, b"raw", [[["deep"]]], {"k": {"j": [7]}}],
    {"shared": SharedArray(8192, DTYPE_CODES["float32"], (4,)), "n": 2**64 - 1},
    7,
]
RESULTS = [
    encode_result(rid, obs, reward, rid & 1 == 1, rid & 2 == 2, rid & 3 == 3, info)
    for rid, (obs, reward, info) in enumerate(
        (obs, reward, info)
        for obs in OBSERVATIONS
        for reward in (0.0, -1.5, float("inf"))
        for info in INFOS
    )
]


def test_the_result_reader_reads_as_python_does_or_declines() -> None:
    def check(data: bytes, _: random.Random) -> None:
        assert result_reader_agrees(wire.parse_result(exact(data)), data)

    fuzz("parse_result", RESULTS, check)
    for payload in RESULTS:  # the seeds themselves are all taken
        assert wire.parse_result(payload) is not None


# ---------------------------------------------------------------------------- the exchange

MAX_REQUEST = 4096  # what the C exchange sends itself; longer requests are the caller's


def server_frames() -> list[bytes]:
    results = [frame_bytes(2, payload, mask=False) for payload in RESULTS[::5]]
    big = encode_result(9, np.zeros(70_000, np.uint8), 1.0, False, False, False, {})
    return [
        *results,
        frame_bytes(2, big, mask=False),  # a 64-bit length
        frame_bytes(2, RESULTS[0], mask=False, length=len(RESULTS[0]) + 1000),
        frame_bytes(2, RESULTS[1], mask=True),  # servers must not mask
        frame_bytes(2, RESULTS[2], fin=False, mask=False) + frame_bytes(0, b"", mask=False),
        frame_bytes(1, b"text", mask=False),
        frame_bytes(9, b"ping", mask=False) + results[0],
        frame_bytes(8, struct.pack("!H", 1000), mask=False),
        frame_bytes(2, RESULTS[3], rsv=4, mask=False),
        results[1] + results[2],
    ]


def first_frame(stream: bytes, max_size: int) -> tuple[int, int, bytes] | None:
    """(first byte, end, payload) of the frame a server's `stream` starts with, as the
    Python framer reads it; None if it is cut short or the framer refuses it."""
    try:
        head = parse_head(stream, 0, len(stream), False, max_size)
    except FrameError:
        return None
    if head is None or head[2] > len(stream):
        return None
    first, start, stop = head
    return first, stop, stream[start:stop]


def unmask(frame: bytes) -> tuple[int, bytes]:
    """(first byte, payload) of one whole masked client frame, as the Python framer reads it."""
    head = parse_head(frame, 0, len(frame), True, None)
    assert head is not None and head[2] == len(frame), "not one whole client frame"
    first, start, stop = head
    return first, apply_mask(frame[start:stop], frame[start - 4 : start])


def drain(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            got = sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        if not got:
            return out
        out += got


def exchange_once(stream: bytes, rng: random.Random) -> None:
    """One exchange over a socket pair: part of `stream` already buffered, the rest to read.

    The buffer's size, offsets and frame size limit, the request and whether
    the peer's end closes are random. The answer is the result the stream
    starts with, as the Python framer and decoder read it; or FALLBACK (TIMEOUT
    while the peer stays open) with every byte read kept in the buffer after
    the ones that were there.
    """
    size = rng.choice((2, 16, 300, 4096, 1 << 17))
    max_size = rng.choice((100, 1 << 20))
    start = rng.randint(0, size // 2)
    buffered = stream[: rng.randint(0, min(len(stream), size - start))]
    buf = exact(rng.randbytes(start) + buffered + rng.randbytes(size - start - len(buffered)))
    request = (
        None if rng.random() < 0.3 else rng.randbytes(rng.choice((0, 5, 125, 126, 4096, 4097)))
    )
    if rng.random() < 0.05:  # offsets that do not fit the buffer are refused
        bad = rng.choice(((-1, 0), (1, 0), (0, size + 1), (size + 1, size + 1)))
        with pytest.raises(ValueError, match="offsets"):
            wire.exchange(buf, *bad, -1, request, 0.0, max_size)
        return
    closes = rng.random() < 0.95
    ours, peer = socket.socketpair()
    with ours, peer:
        # Without the peer's close, waiting for more ends at once (no byte is coming).
        wait = struct.pack("ll", 30, 0) if closes else struct.pack("ll", 0, 1000)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, wait)
        peer.sendall(stream[len(buffered) :])
        if closes:
            peer.shutdown(socket.SHUT_WR)
        spin = rng.choice((0.0, 0.0002))
        new_start, end, out = wire.exchange(
            buf, start, start + len(buffered), ours.fileno(), request, spin, max_size
        )
        sent = drain(peer)
    assert start <= new_start <= end <= size
    if request is not None and len(request) > MAX_REQUEST:  # left to the caller, unsent
        assert (out, sent, new_start, end) == ((wire.FALLBACK,), b"", start, start + len(buffered))
        return
    assert sent == (b"" if request is None else sent)
    if request is not None:
        assert unmask(sent) == (0x82, request)
    frame = first_frame(stream, max_size)
    if out[0] == wire.OK:
        assert frame is not None and frame[0] == 0x82
        assert new_start == start + frame[1]
        assert result_reader_agrees(out, frame[2])
    else:
        assert out == (wire.FALLBACK,) or (not closes and out == (wire.TIMEOUT,))
        assert new_start == start
        assert buf[start:end].tobytes() == stream[: end - start]
        if frame is not None and frame[0] == 0x82 and start + frame[1] <= size:
            assert wire.parse_result(frame[2]) is None  # a result that fits is taken


def test_the_exchange_reports_a_descriptor_it_cannot_use() -> None:
    read_end, write_end = os.pipe()
    try:
        for fd, request, code in (
            (write_end, b"x", wire.SEND_FAILED),
            (read_end, None, wire.RECV_FAILED),
        ):
            buf = bytearray(64)
            assert wire.exchange(buf, 0, 0, fd, request, 0.0, 1 << 20) == (
                0,
                0,
                (code, errno.ENOTSOCK),
            )
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_exchange_reads_frames_as_python_does_or_leaves_them() -> None:
    fuzz("exchange", server_frames(), exchange_once, max_size=1 << 17)


# ---------------------------------------------------------------------------- masking


def test_client_frames_unmask_to_any_payload() -> None:
    def check(data: bytes, rng: random.Random) -> None:
        opcode = rng.choice((0, 1, 2, 8, 9, 10) if len(data) <= 125 else (0, 1, 2))
        assert unmask(wire.mask_frame(opcode, exact(data))) == (0x80 | opcode, data)

    seeds = [bytes(n) for n in (0, 1, 125, 126, 127, 65535, 65536)]
    fuzz("mask_frame", seeds, check)


# ---------------------------------------------------------------------------- palette expansion


def test_palette_expansion_writes_the_reference_bytes_or_refuses() -> None:
    expand_module = pytest.importorskip("openenv_ws._expand")

    def check(data: bytes, rng: random.Random) -> None:
        palette = exact(rng.randbytes(768))
        indices = exact(data)
        out = np.empty(3 * len(data), np.uint8)
        expand_module.expand(indices, palette, out, rng.random() < 0.5)
        assert out.tobytes() == palette.reshape(256, 3)[indices].tobytes()
        wrong = [
            (indices, palette[:767], out),
            (indices, palette, out[:-1] if len(out) else np.empty(1, np.uint8)),
            (indices, palette, np.empty(3 * len(data) + 3, np.uint8)),
            (np.empty(2 * len(data) + 2, np.uint8)[::2], palette, out[: 3 * (len(data) + 1)]),
            (indices, palette, bytes(len(out))),
        ]
        for args in wrong:
            with pytest.raises((ValueError, TypeError, BufferError)):
                expand_module.expand(*args)

    seeds = [bytes(range(256)), bytes(n % 256 for n in range(1000)), b"", b"\xff" * 63]
    fuzz("expand", seeds, check)
