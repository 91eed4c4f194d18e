"""The server's inline path for binary messages (openenv_ws/server/transport/fastws.py).

Requests are parsed and served inside the protocol's ``data_received`` while
the session waits; everything unusual goes through the websockets parser.
These tests mix the two on one connection, split and batch frames across TCP
writes, and check fairness between connections and closes decided inline.
"""

from __future__ import annotations

import struct
import time

import numpy as np

from openenv_ws.protocol import (
    Close,
    Closed,
    Error,
    Open,
    Opened,
    Reset,
    Result,
    Step,
    decode_server_frame,
    encode,
)
from openenv_ws.testing import FakeEnvironment
from openenv_ws.wire.framing import frame_head

from ..._rawwire import OP_BINARY, OP_CONT, OP_PING, OP_PONG, RawWS, frame_bytes
from .conftest import UNIT, serve, wait_until

SHAPE = {"obs_shape": [7, 5, 3], "episode_length": 10_000}


def _opened(ws: RawWS, config: dict[str, object]) -> None:
    ws.send(encode(Open(id=1, config=config)))
    assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)


def test_frame_header_lengths() -> None:
    assert frame_head(OP_BINARY, 0) == b"\x82\x00"
    assert frame_head(OP_BINARY, 125) == b"\x82\x7d"
    assert frame_head(OP_BINARY, 126) == b"\x82\x7e\x00\x7e"
    assert frame_head(OP_BINARY, 65535) == b"\x82\x7e\xff\xff"
    assert frame_head(OP_BINARY, 65536) == b"\x82\x7f" + struct.pack("!Q", 65536)


def test_batched_and_split_frames_mixed_with_control_and_fragments() -> None:
    """One TCP write holding steps, a ping and a fragmented step; then a request
    dribbled one byte a write. Every reply comes in order and equals in-process."""
    local = FakeEnvironment(SHAPE)
    expected = [local.reset(seed=3).obs]
    with serve() as server, RawWS.to(server.url) as ws:
        _opened(ws, SHAPE)
        batch = frame_bytes(OP_BINARY, encode(Reset(id=2, seed=3)))
        batch += b"".join(
            frame_bytes(OP_BINARY, encode(Step(id=3 + i, action=i % 4))) for i in range(5)
        )
        batch += frame_bytes(OP_PING, b"hello")
        step = encode(Step(id=8, action=2))
        batch += frame_bytes(OP_BINARY, step[:3], fin=False)
        batch += frame_bytes(OP_CONT, step[3:7], fin=False)
        batch += frame_bytes(OP_CONT, step[7:])
        batch += frame_bytes(OP_BINARY, encode(Step(id=9, action=1)))
        ws.send_raw(batch)
        expected += [local.step(i % 4).obs for i in range(5)]
        expected += [local.step(2).obs, local.step(1).obs]
        dribble = frame_bytes(OP_BINARY, encode(Step(id=10, action=3)))
        for i in range(len(dribble)):
            ws.send_raw(dribble[i : i + 1])
            time.sleep(0.002)
        expected.append(local.step(3).obs)

        ids, pongs = [], []
        while len(ids) < 9:
            opcode, payload = ws.read_frame(5 * UNIT)
            if opcode == OP_PONG:
                pongs.append(payload)
                continue
            assert opcode == OP_BINARY
            frame = decode_server_frame(payload)
            assert isinstance(frame, Result), frame
            np.testing.assert_array_equal(frame.obs, expected[len(ids)])
            ids.append(frame.id)
    assert ids == list(range(2, 11))
    assert pongs == [b"hello"]


def test_a_pipelining_client_does_not_hold_up_other_sessions() -> None:
    """Session A sends 40 slow steps in one write; session B's step is answered
    after at most a few of them, not after all 40."""
    slow = {"step_sleep": 0.05, "episode_length": 1000}
    with serve() as server, RawWS.to(server.url) as a, RawWS.to(server.url) as b:
        _opened(a, slow)
        _opened(b, {})
        for ws in (a, b):
            ws.send(encode(Reset(id=2, seed=0)))
            assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Result)
        a.send_raw(
            b"".join(frame_bytes(OP_BINARY, encode(Step(id=3 + i, action=0))) for i in range(40))
        )
        assert decode_server_frame(a.read_frame(5 * UNIT)[1]).id == 3  # A is being served
        b.send(encode(Step(id=3, action=1)))
        assert isinstance(decode_server_frame(b.read_frame(5 * UNIT)[1]), Result)
        # What A has received by now: B waited for at most a few of A's steps.
        answered = 1 + len(a.frames_now())
        assert answered < 20, f"B waited for {answered} of A's 40 pipelined steps"
        for _ in range(40 - answered):
            assert decode_server_frame(a.read_frame(10 * UNIT)[1]).id is not None


def test_close_and_fatal_errors_decided_inline_end_the_session() -> None:
    """A ``close`` and a fatal error, both served inline, close the connection with
    their codes and free the session at once (not parked for resumption)."""
    with serve(resume_grace=30.0) as server:
        registry = server.server.config.app.state.registry
        supervisor = server.server.config.app.state.supervisor
        with RawWS.to(server.url) as ws:
            _opened(ws, {})
            ws.send(encode(Reset(id=2, seed=0)))
            ws.read_frame(5 * UNIT)
            ws.send(encode(Close(id=3)))
            messages, code = ws.until_close(5 * UNIT)
            assert code == 1000
            assert isinstance(decode_server_frame(messages[0]), Closed)
        with RawWS.to(server.url) as ws:
            _opened(ws, {})
            ws.send(encode(Reset(id=2, seed=0)))
            ws.read_frame(5 * UNIT)
            ws.send(b"\xc1 not msgpack")
            messages, code = ws.until_close(5 * UNIT)
            error = decode_server_frame(messages[0])
            assert isinstance(error, Error) and error.fatal and error.code == "bad_frame"
            assert code == 1002
        with RawWS.to(server.url) as ws:  # 1011 would read as a dropped connection
            _opened(ws, {"fail_at_step": 2})
            ws.send(encode(Reset(id=2, seed=0)))
            ws.read_frame(5 * UNIT)
            ws.send(encode(Step(id=3, action=0)))
            ws.read_frame(5 * UNIT)
            ws.send(encode(Step(id=4, action=0)))
            messages, code = ws.until_close(5 * UNIT)
            error = decode_server_frame(messages[0])
            assert isinstance(error, Error) and error.code == "internal"
            assert code == 1011
        wait_until(lambda: not registry.active, 5 * UNIT, what="sessions freed")
        assert not list(supervisor.store.parked_sessions())
