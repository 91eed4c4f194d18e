"""The sync client's C step round trip (openenv_ws/_wire.c) against the Python reader.

The C reader takes only results in the canonical layout and leaves every other
frame to the Python one, so each test checks both halves: what it decodes
equals what ``decode_server_frame`` decodes, what it must not take it leaves
untouched in the buffer, and the client's answers over a scripted real
socket (pings, late replies, dribbled bytes, oversize frames, cuts, timeouts)
are those of the Python reader.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from openenv_ws import protocol
from openenv_ws._arrays import DTYPE_CODES
from openenv_ws._shm import SharedArray
from openenv_ws.client._core import ClientCore
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.client.sync import exchange
from openenv_ws.errors import RequestTimeout, SessionClosed
from openenv_ws.protocol import (
    Result,
    StateReply,
    decode_server_frame,
    encode,
    encode_result,
    encode_step,
)
from openenv_ws.wire.compress import ObsPacker
from openenv_ws.wire.encode import layout

from ..wire.protocol.test_native_codec import result_reader_agrees
from .test_transports import accept, frame

wire = protocol.native_wire
pytestmark = pytest.mark.skipif(wire is None, reason="openenv_ws._wire is not built here")


def test_the_c_reader_is_built_where_a_compiler_is() -> None:
    if os.environ.get("CI"):
        assert protocol.native_wire is not None, "openenv_ws._wire was not built; is gcc missing?"


# ---------------------------------------------------------------------------- decoding


def _infos(width: int) -> st.SearchStrategy[dict[str, Any]]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False, width=width),  # type: ignore[arg-type]
        st.text(max_size=300),
    )
    return st.dictionaries(st.text(max_size=40), scalars, max_size=20)


def _depth(value: Any) -> int:
    """How many levels of lists and maps `value` nests."""
    if type(value) is dict:
        value = list(value.values())
    if type(value) is not list:
        return 0
    return 1 + max(map(_depth, value), default=0)


@st.composite
def results(draw: st.DrawFn) -> bytes:
    """A result payload in the canonical layout, with every width of every field."""
    rid = draw(st.integers(0, protocol.MAX_ID))
    kind = draw(st.sampled_from(["nil", "inline", "shared", "compressed", "structured"]))
    if kind == "nil":
        obs: Any = None
    elif kind == "structured":  # SPEC section 22
        leaves = st.one_of(
            _infos(64).map(lambda d: next(iter(d.values()), None)),
            st.binary(max_size=40),
            st.builds(np.arange, st.integers(0, 40)).map(lambda a: a.astype(np.int16)),
        )
        obs = draw(
            st.recursive(
                leaves,
                lambda kids: (
                    st.lists(kids, max_size=4)
                    | st.dictionaries(st.text(max_size=8), kids, max_size=4)
                ),
                max_leaves=20,
            )
        )
        assume(_depth(obs) <= 8)  # deeper: the reference refuses it, and the C reader too
    elif kind == "inline":
        obs = np.frombuffer(draw(st.binary(max_size=70_000)), np.uint8)
    elif kind == "compressed":
        codec = draw(st.sampled_from(["zstd", "lz4"]))
        obs = ObsPacker(codec, False).pack(
            np.frombuffer(draw(st.binary(max_size=70_000)), np.uint8)
        )
    else:
        obs = SharedArray(
            draw(st.integers(4096, 2**40)),
            draw(st.sampled_from(sorted(DTYPE_CODES.values()))),
            tuple(draw(st.lists(st.integers(0, 300), max_size=3))),
        )
    reward = draw(st.floats(allow_nan=False))
    flags = draw(st.tuples(st.booleans(), st.booleans(), st.booleans()))
    single = draw(st.booleans())  # floats in the info as float32, as another encoder may send them
    info = draw(_infos(32 if single else 64))
    data = encode_result(rid, obs, reward, *flags, info)
    if single:
        # The info is the last field: the frame with an empty one ends in its fixmap byte.
        head = encode_result(rid, obs, reward, *flags, {})
        assert head.endswith(b"\xa4info\x80")
        data = head[:-1] + msgpack.packb(info, use_single_float=True)
    return data


@settings(max_examples=300, deadline=None)
@given(results())
def test_the_c_reader_decodes_every_canonical_result_as_python_does(payload: bytes) -> None:
    got = wire.parse_result(payload)
    assert got is not None
    assert result_reader_agrees(got, payload)


def _canonical(info: Any = None, reward: float = 1.5) -> bytes:
    return encode_result(7, None, reward, False, True, True, info or {"lives": 3})


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("info holds a list", _canonical({"a": [1, 2]})),
        ("info holds a map", _canonical({"a": {"b": 1}})),
        ("info holds bytes", _canonical({"a": b"raw"})),
        ("info is nil", _canonical().rpartition(b"\xa4info")[0] + b"\xa4info\xc0"),
        ("a NaN reward", _canonical().replace(struct.pack(">d", 1.5), struct.pack(">d", math.nan))),
        ("a byte after the map", _canonical() + b"\x00"),
        ("keys in another order", msgpack.packb({"id": 7, "op": "result"})),
        ("an error frame", encode(protocol.Error(id=7, code="internal", message="x", fatal=False))),
        ("a state frame", encode(StateReply(id=7, state={"step_count": 1}))),
        ("ext type 4", _canonical().replace(b"\xa3obs\xc0", b"\xa3obs\xd4\x04\x00")),
        (
            "an observation nesting 9 levels",
            _canonical().replace(b"obs\xc0", b"obs" + b"\x91" * 9 + b"\x01"),
        ),
        ("a nested ext type 4", _canonical().replace(b"obs\xc0", b"obs\x91\xd4\x04\x00")),
        (
            "an observation map with an int key",
            _canonical().replace(b"obs\xc0", b"obs\x81\x01\x02"),
        ),
        ("an info key that is not UTF-8", _canonical({"a": 1}).replace(b"\xa1a", b"\xa1\xff")),
        ("an integer reward", _canonical().replace(b"\xcb" + struct.pack(">d", 1.5), b"\x01")),
    ],
)
def test_the_c_reader_leaves_anything_else_to_python(name: str, payload: bytes) -> None:
    assert wire.parse_result(payload) is None, name


def test_the_c_reader_hands_over_a_structured_observation_of_8_levels() -> None:
    deep: Any = "x"
    for level in range(8):
        deep = [deep] if level % 2 else {"k": deep}
    payload = encode_result(3, deep, 0.5, False, False, False, {})
    got = wire.parse_result(payload)
    assert got is not None and got[2] == protocol.STRUCTURED
    assert result_reader_agrees(got, payload)
    assert ClientCore({}, token=None, max_frame_size=1 << 22).native_result(got).obs == deep


def test_the_c_reader_takes_no_truncated_result() -> None:
    data = encode_result(70_000, np.arange(300, dtype=np.uint8), 2.0, True, False, True, {"x": 1})
    assert wire.parse_result(data) is not None
    for n in range(len(data)):
        assert wire.parse_result(data[:n]) is None


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_the_c_reader_never_fails_on_noise(noise: bytes) -> None:
    prefix = layout(Result).prefix
    for data in (noise, prefix + noise):
        out = wire.parse_result(data)
        assert out is None or out[0] == wire.OK


# ---------------------------------------------------------------------------- over a socket


class Scripted:
    """A loopback server that answers the handshake, then plays `script(conn)` in a thread."""

    def __init__(self, script: Callable[[socket.socket], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}/ws"
        self.received: list[tuple[int, bytes]] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(script,), daemon=True)
        self._thread.start()

    def _run(self, script: Callable[[socket.socket], None]) -> None:
        try:
            conn, _ = self._listener.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                conn.sendall(accept(head))
                self.conn = conn
                script(conn)
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def read(self, conn: socket.socket) -> tuple[int, bytes]:
        """The next client frame, unmasked; recorded."""

        def exactly(n: int) -> bytes:
            out = b""
            while len(out) < n:
                got = conn.recv(n - len(out))
                if not got:
                    raise EOFError
                out += got
            return out

        head = exactly(2)
        n = head[1] & 0x7F
        head += exactly({126: 2, 127: 8}.get(n, 0))
        length = int.from_bytes(head[2:], "big") if n >= 126 else n
        opcode, data, _ = _unmask(head + exactly(4 + length))
        self.received.append((opcode, data))
        return opcode, data

    def join(self) -> None:
        self._thread.join(10)
        self._listener.close()
        if self.error is not None:
            raise self.error


@pytest.fixture
def core() -> ClientCore:
    return ClientCore({}, token=None, max_frame_size=1 << 22)


def _result(rid: int, obs: Any = None, info: dict[str, Any] | None = None) -> bytes:
    return frame(2, encode_result(rid, obs, float(rid), False, False, False, info or {"n": rid}))


def _dribble(conn: socket.socket, data: bytes) -> None:
    for i in range(len(data)):
        conn.sendall(data[i : i + 1])


@pytest.mark.parametrize("busy_poll", [0.0, 0.002])
def test_pings_late_replies_and_dribbled_frames_get_the_python_readers_answers(
    core: ClientCore, busy_poll: float
) -> None:
    big = np.arange(300_000, dtype=np.uint8)  # above the reader's first buffer

    def script(conn: socket.socket) -> None:
        assert server.read(conn)[1] == encode_step(5, 1, True)
        conn.sendall(_result(5))
        assert server.read(conn)[1] == encode_step(6, 2, True)
        # A ping, a late reply to an earlier request, then the answer, byte by byte.
        _dribble(conn, frame(9, b"still there?") + _result(4) + _result(6))
        assert server.read(conn) == (10, b"still there?")
        assert server.read(conn)[1] == encode_step(7, 3, False)
        conn.sendall(_result(7, big))
        assert server.read(conn)[1] == encode_step(8, 0, True)
        conn.sendall(frame(2, encode(StateReply(id=8, state={"ok": True}))) + _result(9))
        assert server.read(conn)[1] == encode_step(9, 0, True)  # its answer came early

    server = Scripted(script)
    ws = BlockingWebSocket(server.url, busy_poll=busy_poll)
    try:
        fields = ws.exchange(encode_step(5, 1, True), timeout=10)
        assert fields is not None and fields[:5] == (wire.OK, 5, 0, None, 5.0)
        assert fields[8] == {"n": 5} and ws.buffered == 0
        reply = exchange(ws, core, encode_step(6, 2, True), 6, 10)
        assert isinstance(reply, Result) and (reply.id, reply.info) == (6, {"n": 6})
        reply = exchange(ws, core, encode_step(7, 3, False), 7, 10)
        assert isinstance(reply, Result) and np.array_equal(reply.obs, big)
        state = exchange(ws, core, encode_step(8, 0, True), 8, 10)
        assert isinstance(state, StateReply) and state.state == {"ok": True}
        assert ws.buffered > 0  # the next result is already here, unread
        reply = exchange(ws, core, encode_step(9, 0, True), 9, 10)
        assert isinstance(reply, Result) and reply.id == 9 and ws.buffered == 0
    finally:
        ws.close(timeout=0.5)
    server.join()


def test_a_cut_in_the_middle_of_a_result_is_session_closed(core: ClientCore) -> None:
    def script(conn: socket.socket) -> None:
        server.read(conn)
        conn.sendall(_result(1)[:9])
        conn.shutdown(socket.SHUT_RDWR)

    server = Scripted(script)
    ws = BlockingWebSocket(server.url)
    with pytest.raises(SessionClosed, match="closed the connection"):
        exchange(ws, core, encode_step(1, 0, True), 1, 10)
    assert ws.closed
    server.join()


def test_a_silent_server_is_a_request_timeout_and_its_late_reply_is_skipped(
    core: ClientCore,
) -> None:
    go_on = threading.Event()

    def script(conn: socket.socket) -> None:
        server.read(conn)
        go_on.wait(10)
        server.read(conn)
        conn.sendall(_result(1)[:5])  # the late reply, in two pieces
        conn.sendall(_result(1)[5:] + _result(2))

    server = Scripted(script)
    ws = BlockingWebSocket(server.url)
    try:
        with pytest.raises(RequestTimeout):
            exchange(ws, core, encode_step(1, 0, True), 1, 0.2)
        go_on.set()
        reply = exchange(ws, core, encode_step(2, 0, True), 2, 10)
        assert isinstance(reply, Result) and reply.id == 2
    finally:
        ws.close(timeout=0.5)
    server.join()


def test_a_server_gone_before_the_request_is_session_closed(core: ClientCore) -> None:
    def script(conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()  # a reset, not a close frame

    server = Scripted(script)
    ws = BlockingWebSocket(server.url)
    server.join()
    with pytest.raises(SessionClosed):
        for rid in range(1, 4):  # the first send may still be accepted by the kernel
            exchange(ws, core, encode_step(rid, 0, True), rid, 10)
    assert ws.closed


# Messages as (kind, id, array length, info); their bytes are made in the test
# (hypothesis keeps a repr of what it draws, which should stay small).
messages = st.one_of(
    st.tuples(
        st.just("result"),
        st.integers(0, 2**32 - 1),
        st.sampled_from([0, 1, 40, 70_000, 200_000]),
        _infos(64),
    ),
    st.tuples(st.just("result"), st.integers(0, 300), st.none(), st.none()),
    st.tuples(
        st.sampled_from(["state", "error", "ping"]), st.integers(0, 300), st.none(), st.none()
    ),
)


def _wire_bytes(kind: str, rid: int, n: int | None, info: dict[str, Any] | None) -> bytes:
    if kind == "result":
        return _result(rid, None if n is None else np.arange(n, dtype=np.uint16), info)
    if kind == "state":
        return frame(2, encode(StateReply(id=rid, state={"n": rid})))
    if kind == "error":
        error = protocol.Error(id=rid, code="bad_request", message="no", fatal=False)
        return frame(2, encode(error))
    return frame(9, b"ping")


@settings(max_examples=40, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8), st.lists(st.integers(1, 5000), max_size=30))
def test_any_stream_of_frames_reads_as_the_python_reader_reads_it(
    drawn: list[tuple[str, int, int | None, dict[str, Any] | None]], cuts: list[int]
) -> None:
    stream = [(kind, _wire_bytes(kind, *rest)) for kind, *rest in drawn]
    data = b"".join(wire_bytes for _, wire_bytes in stream)

    def script(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        at = 0
        for cut in cuts:  # arbitrary write boundaries, then the rest
            conn.sendall(data[at : at + cut])
            at += cut
        conn.sendall(data[at:])
        while conn.recv(1 << 16):  # until the client closes: pongs read, none left unread
            pass  # (closing with unread bytes would reset the connection under the client)

    server = Scripted(script)
    core = ClientCore({}, token=None, max_frame_size=1 << 22)
    ws = BlockingWebSocket(server.url)
    try:
        for kind, wire_bytes in stream:
            if kind == "ping":
                continue
            fields = ws.exchange(None, timeout=10)
            got = core.native_result(fields) if fields else ws.recv(core.decode, timeout=10)
            want = decode_server_frame(_unframe(wire_bytes))
            assert type(got) is type(want)
            if isinstance(want, Result):
                assert isinstance(got, Result)
                assert (got.id, got.reward, got.info) == (want.id, want.reward, want.info)
                assert (
                    np.array_equal(got.obs, want.obs) if want.obs is not None else got.obs is None
                )
                # (the C reader leaves a result behind a ping or above its buffer to Python)
            else:
                assert got == want and fields is None
        trailing_pings = len(data) - len(b"".join(b for _, b in _until_last_message(stream)))
        assert ws.buffered <= trailing_pings  # nothing else left unread
    finally:
        ws.close(timeout=0.5)
    server.join()


def _until_last_message(stream: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    while stream and stream[-1][0] == "ping":
        stream = stream[:-1]
    return stream


def _unframe(data: bytes) -> bytes:
    """The payload of one unmasked server frame."""
    n = data[1] & 0x7F
    head = {126: 4, 127: 10}.get(n, 2)
    return data[head:]


# ---------------------------------------------------------------------------- masking


def _unmask(frame_bytes: bytes) -> tuple[int, bytes, bytes]:
    """(opcode, payload, key) of one masked client frame."""
    b0, b1 = frame_bytes[0], frame_bytes[1]
    assert b0 & 0x80 and b1 & 0x80, "final and masked"
    n, at = b1 & 0x7F, 2
    if n == 126:
        n, at = struct.unpack("!H", frame_bytes[2:4])[0], 4
    elif n == 127:
        n, at = struct.unpack("!Q", frame_bytes[2:10])[0], 10
    key = frame_bytes[at : at + 4]
    body = frame_bytes[at + 4 :]
    assert len(body) == n
    return b0 & 0x0F, bytes(b ^ key[i % 4] for i, b in enumerate(body)), key


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 125, 126, 127, 65535, 65536, 70_001])
def test_client_frames_unmask_to_their_payload_at_every_length_form(n: int) -> None:
    payload = os.urandom(n)
    opcode, got, _ = _unmask(wire.mask_frame(2, payload))
    assert (opcode, got) == (2, payload)
    assert _unmask(wire.mask_frame(8, b"\x03\xe8bye"))[:2] == (8, b"\x03\xe8bye")
    with pytest.raises(ValueError, match="opcode"):
        wire.mask_frame(16, b"")


def test_every_frame_gets_a_fresh_key_and_a_forked_child_other_keys() -> None:
    keys = [_unmask(wire.mask_frame(2, b"k"))[2] for _ in range(200)]  # across pool refills
    assert len(set(keys)) > 190
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first keys, to the parent
        try:
            os.write(write, b"".join(_unmask(wire.mask_frame(2, b"k"))[2] for _ in range(8)))
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    parent = b"".join(_unmask(wire.mask_frame(2, b"k"))[2] for _ in range(8))
    assert len(child) == 32 and child != parent


class _Poked(Exception):
    """Raised by the test's signal handler."""


@pytest.mark.parametrize("busy_poll", [0.0, 0.5])
def test_a_signal_while_waiting_for_a_reply_runs_its_handler_at_once(
    core: ClientCore, busy_poll: float
) -> None:
    """Blocked in the kernel or spinning (then about to block with no timeout), the
    read lets the signal's handler run as the interpreter would, not after the reply."""
    done = threading.Event()

    def script(conn: socket.socket) -> None:
        server.read(conn)
        done.wait(10)  # never answers while the client waits

    def poke(signum: int, frame: Any) -> None:
        raise _Poked

    previous = signal.signal(signal.SIGUSR1, poke)
    server = Scripted(script)
    ws = BlockingWebSocket(server.url, busy_poll=busy_poll)
    timer = threading.Timer(
        0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1)
    )
    try:
        timer.start()
        began = time.monotonic()
        with pytest.raises(_Poked):
            exchange(ws, core, encode_step(1, 0, True), 1, None)
        assert time.monotonic() - began < 5  # the server stays silent for 10 s
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        done.set()
        ws.close(timeout=0.5)
    server.join()
