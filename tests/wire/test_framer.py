"""The RFC 6455 framer (openenv_ws.wire.framing): frames in any pieces, every violation's code."""

from __future__ import annotations

import os
import struct

import pytest

from openenv_ws.wire.framing import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Assembler,
    Frame,
    FrameError,
    FrameReader,
    apply_mask,
    close_code_allowed,
    close_payload,
    frame_head,
    parse_close,
    parse_head,
    serialize,
)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 70_000])
@pytest.mark.parametrize("mask", [True, False])
def test_serialized_frames_parse_back_whole_and_in_pieces(size: int, mask: bool) -> None:
    payload = os.urandom(size)
    wire = serialize(OP_BINARY, payload, mask=mask)
    first, start, stop = parse_head(wire, 0, len(wire), mask, None) or (0, 0, 0)
    assert first == 0x82 and stop == len(wire) and stop - start == size
    got = wire[start:stop] if not mask else apply_mask(wire[start:stop], wire[start - 4 : start])
    assert got == payload
    # Fed a few bytes at a time, the reader gives the frame once, when it is whole.
    reader = FrameReader(masked=mask)
    frames = []
    for at in range(0, len(wire), 7 if size < 200 else 4096):
        reader.feed(wire[at : at + (7 if size < 200 else 4096)])
        while (frame := reader.next_frame()) is not None:
            frames.append(frame)
    assert frames == [Frame(True, OP_BINARY, payload, 0)]
    assert reader.pending == 0


def test_an_incomplete_header_is_none_and_the_payload_end_says_when_the_frame_is_whole() -> None:
    wire = serialize(OP_BINARY, b"x" * 300, mask=False)
    assert parse_head(wire, 0, 1, False, None) is None
    assert parse_head(wire, 0, 3, False, None) is None  # a 16-bit length, not all there
    head = parse_head(wire, 0, 10, False, None)
    assert head is not None and head[2] == len(wire) > 10
    # At an offset of a larger buffer.
    buf = b"junk" + wire
    assert parse_head(buf, 4, len(buf), False, None) == (0x82, 8, len(buf))


@pytest.mark.parametrize(
    ("wire", "masked", "limit", "code", "words"),
    [
        # A fixed key: the test's id (its bytes) is the same in every xdist worker.
        (frame_head(OP_BINARY, 1, key=b"abcd") + b"a", False, None, 1002, "masked"),
        (serialize(OP_BINARY, b"a", mask=False), True, None, 1002, "unmasked"),
        (serialize(OP_BINARY, b"a", mask=False, rsv=4), False, None, 1002, "reserved bits"),
        (serialize(5, b"", mask=False), False, None, 1002, "unknown opcode 5"),
        (serialize(11, b"", mask=False), False, None, 1002, "unknown opcode 11"),
        (serialize(OP_PING, b"", mask=False, fin=False), False, None, 1002, "fragmented control"),
        (serialize(OP_PING, b"p" * 126, mask=False), False, None, 1002, "above 125"),
        (serialize(OP_BINARY, b"y" * 2000, mask=False), False, 1024, 1009, "limit of 1024"),
        # A declared length beyond the limit is refused from the header alone.
        (frame_head(OP_BINARY, 1 << 40), False, 1 << 20, 1009, "limit"),
        (frame_head(OP_BINARY, 1 << 40, key=b"abcd"), True, 1 << 20, 1009, "server's limit"),
    ],
)
def test_violations_carry_their_close_code(
    wire: bytes, masked: bool, limit: int | None, code: int, words: str
) -> None:
    with pytest.raises(FrameError, match=words) as caught:
        parse_head(wire, 0, len(wire), masked, limit)
    assert caught.value.code == code


def test_fragments_join_and_control_frames_may_come_between() -> None:
    reader = FrameReader(masked=True)
    assembler = Assembler(max_size=10)
    for frame in (
        serialize(OP_TEXT, b"h\xc3", mask=True, fin=False),
        serialize(OP_PING, b"p", mask=True),
        serialize(OP_CONT, b"\xa9llo", mask=True),
    ):
        reader.feed(frame)
    messages, controls = [], []
    while (frame := reader.next_frame()) is not None:
        if frame.opcode >= OP_CLOSE:
            controls.append(frame.opcode)
        elif (whole := assembler.add(frame.opcode, frame.fin, frame.payload)) is not None:
            messages.append(whole)
    assert messages == [(OP_TEXT, "héllo".encode())]
    assert controls == [OP_PING] and not assembler.active


@pytest.mark.parametrize(
    ("frames", "code", "words"),
    [
        ([(OP_BINARY, False, b"a"), (OP_BINARY, True, b"b")], 1002, "inside a fragmented"),
        ([(OP_CONT, True, b"orphan")], 1002, "no message to continue"),
        ([(OP_BINARY, False, b"123456"), (OP_CONT, True, b"789012")], 1009, "limit of 10"),
        ([(OP_TEXT, True, b"\xff")], 1007, "not UTF-8"),
        ([(OP_TEXT, False, b"\xc3"), (OP_CONT, True, b"(")], 1007, "not UTF-8"),
    ],
)
def test_message_violations(frames: list[tuple[int, bool, bytes]], code: int, words: str) -> None:
    assembler = Assembler(max_size=10)
    with pytest.raises(FrameError, match=words) as caught:
        for opcode, fin, payload in frames:
            assembler.add(opcode, fin, payload)
    assert caught.value.code == code


def test_close_payloads() -> None:
    assert parse_close(b"") == (1005, "")
    assert parse_close(close_payload(1000, "bye")) == (1000, "bye")
    assert parse_close(close_payload(4001, "é" * 100)) == (4001, "é" * 61)  # 123 bytes at most
    assert len(close_payload(1000, "x" * 200)) == 125
    for bad, code in ((b"\x03", 1002), (struct.pack("!H", 1005), 1002), (b"\x03\xe8\xff", 1007)):
        with pytest.raises(FrameError) as caught:
            parse_close(bad)
        assert caught.value.code == code
    assert [
        c
        for c in (999, 1000, 1004, 1006, 1011, 1015, 2999, 3000, 4999, 5000)
        if close_code_allowed(c)
    ] == [
        1000,
        1011,
        3000,
        4999,
    ]


def test_client_frames_are_masked_with_fresh_keys_and_server_frames_are_not() -> None:
    keys = {serialize(OP_PONG, b"k", mask=True)[2:6] for _ in range(50)}
    assert len(keys) > 40
    assert serialize(OP_PONG, b"k", mask=False) == b"\x8a\x01k"
    head = frame_head(OP_BINARY, 5, fin=False, rsv=1, key=b"abcd")
    assert head == bytes((0x12, 0x85)) + b"abcd"
