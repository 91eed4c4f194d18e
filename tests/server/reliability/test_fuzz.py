"""Fuzz a live ``openenv-ws serve`` process with malformed, random and misplaced frames.

Frames come from Hypothesis: random bytes, random MessagePack maps, valid
frames with bytes flipped, cut or inserted, text messages, oversize messages,
WebSocket framing violations, and sequences of well-typed requests in every
order (so most arrive in a state that refuses them). The oracle:

- every frame gets an ``error`` frame whose code is in the table of SPEC
  section 8 with that table's ``fatal`` flag (a fatal one followed by the
  table's close code), or a reply if the bytes happened to make a valid
  request, or a close by the WebSocket layer with a documented code (1002
  framing, 1007 bad UTF-8 text, 1009 too big);
- request sequences get exactly the replies an in-process session gives to
  the same bytes (the sans-I/O reference);
- three healthy sessions step all along and every result equals the
  in-process :class:`FakeEnvironment`'s;
- the server process never dies, logs no traceback, and ends with no session.

``OPENENV_WS_FUZZ_FRAMES`` scales the run (default 10,000 frames).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openenv_ws.client import EnvClient
from openenv_ws.errors import ProtocolError
from openenv_ws.protocol import (
    ERRORS,
    Close,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    Snapshot,
    StateReply,
    Step,
    decode_server_frame,
    encode,
)
from openenv_ws.providers._base import read_output
from openenv_ws.server import ServerLimits, SessionRegistry
from openenv_ws.server.session.supervisor import Link, SupervisedSession, Supervisor
from openenv_ws.testing import FakeEnvironment, fake_factory

from ..._rawwire import OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, RawWS, frame_bytes
from .conftest import UNIT, health, wait_until

LIMIT = 16 * 1024
GRACE = 0.2
TOTAL = int(os.environ.get("OPENENV_WS_FUZZ_FRAMES", "10000"))
WS_LAYER_CLOSES = {1002, 1007, 1009}
HEALTHY = {"episode_length": 1_000_000, "obs_shape": [8, 8]}
SETTINGS = {
    "deadline": None,
    "database": None,
    "derandomize": True,
    "suppress_health_check": list(HealthCheck),
}


@dataclass
class Tally:
    frames: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closes: dict[int, int] = field(default_factory=dict)
    replies: int = 0


# --------------------------------------------------------------------------- the server


@dataclass
class Live:
    proc: subprocess.Popen[bytes]
    url: str
    http: str
    log: Any

    def output(self) -> str:
        return read_output(self.log)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0"]
    cmd += ["--max-frame-size", str(LIMIT), "--grace", str(GRACE), "--no-web"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip().rsplit(" ", 1)[-1]
    assert url.startswith("ws://127.0.0.1:"), url
    server = Live(proc, url, url.replace("ws://", "http://").removesuffix("/ws"), log)
    try:
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30 * UNIT)
        log.close()


# --------------------------------------------------------------------------- the oracle


class Prober:
    """Sends one fuzz frame at a time and checks what comes back."""

    def __init__(self, url: str, tally: Tally) -> None:
        self.url = url
        self.tally = tally
        self.ws: RawWS | None = None  # a connection in a known state, kept between frames
        self.state = "fresh"

    def connection(self, state: str) -> RawWS:
        if self.ws is not None and self.state == state:
            return self.ws
        self.drop()
        ws = RawWS.to(self.url, timeout=10 * UNIT)
        setup = {"fresh": [], "open": [Open(id=1)], "running": [Open(id=1), Reset(id=2, seed=3)]}
        for frame in setup[state]:
            ws.send(encode(frame))
        for _ in setup[state]:
            reply = decode_server_frame(ws.read_frame(10 * UNIT)[1])
            assert not isinstance(reply, Error), reply
        self.ws, self.state = ws, state
        return ws

    def drop(self) -> None:
        if self.ws is not None:
            self.ws.close()
        self.ws = None

    def probe(self, state: str, data: bytes, *, opcode: int = OP_BINARY, raw: bool = False) -> None:
        ws = self.connection(state)
        self.tally.frames += 1
        if raw:
            ws.send_raw(data)
        else:
            ws.send(data, opcode)
        self.check(ws, sent_text=opcode == OP_TEXT)

    def check(self, ws: RawWS, *, sent_text: bool) -> None:
        tally = self.tally
        while True:
            try:
                opcode, payload = ws.read_frame(10 * UNIT)
            except TimeoutError:
                raise AssertionError("no reply and no close within 10 s") from None
            except (EOFError, ConnectionError) as exc:
                raise AssertionError(f"connection dropped without a close frame: {exc!r}") from exc
            if opcode in (OP_PING, OP_PONG):
                continue
            if opcode == OP_CLOSE:
                code = int.from_bytes(payload[:2], "big")
                assert code in WS_LAYER_CLOSES, f"undocumented close {code}: {payload[2:]!r}"
                tally.closes[code] = tally.closes.get(code, 0) + 1
                self.drop()
                return
            if opcode == OP_TEXT:  # a text message selected OpenEnv's JSON dialect
                assert sent_text, "a text reply to a binary frame"
                self.drop()
                return
            frame = decode_server_frame(payload)
            if not isinstance(frame, Error):
                tally.replies += 1  # the bytes made a valid request; the state is now unknown
                self.drop()
                return
            info = ERRORS.get(frame.code)
            assert info is not None, f"undocumented error code {frame.code!r}"
            assert frame.fatal == info.fatal, frame
            assert frame.message, frame
            tally.errors[frame.code] = tally.errors.get(frame.code, 0) + 1
            if frame.fatal:
                _, code = ws.until_close(10 * UNIT)
                assert code == info.close_code, (frame, code)
                self.drop()
            return


# --------------------------------------------------------------------------- strategies

STATES = st.sampled_from(["fresh", "open", "running"])
CLIENT_OPS = ["open", "reset", "step", "state", "snapshot", "restore", "close"]
OTHER_OPS = ["opened", "result", "error", "closed", "", "STEP", "step "]
KEYS = ["op", "id", "version", "config", "token", "resume", "seed", "episode_id", "options"]
KEYS += ["action", "obs", "snapshot", "x"]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.binary(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
maps = st.dictionaries(
    st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), values, max_size=6
).flatmap(
    lambda extra: st.fixed_dictionaries(
        {
            "op": st.one_of(st.sampled_from(CLIENT_OPS + OTHER_OPS), values),
            "id": st.one_of(st.integers(0, 2**32 - 1), values),
        }
    ).map(lambda envelope: {**extra, **envelope})
)
VALID = [
    encode(f)
    for f in (
        Open(id=1, config={"episode_length": 3}),
        Reset(id=2, seed=7, episode_id="e", options={"a": [1, 2.5]}),
        Step(id=3, action=2),
        Step(id=4, action=[1, 2], obs=False),
        GetState(id=5),
        Snapshot(id=6),
        Restore(id=7, snapshot=b"\x94\x01\x02\x03\xc0"),
        Close(id=8),
    )
]
mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "delete", "set"]),
        st.integers(0, 200),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for kind, where, byte in edits:
        i = where % (len(buf) + 1)
        if kind == "flip" and i < len(buf):
            buf[i] ^= 1 << (byte % 8)
        elif kind == "cut":
            del buf[i:]
        elif kind == "insert":
            buf.insert(i, byte)
        elif kind == "delete" and i < len(buf):
            del buf[i]
        elif kind == "set" and i < len(buf):
            buf[i] = byte
    return bytes(buf)


requests = st.one_of(
    st.builds(
        Open,
        id=st.just(0),
        version=st.sampled_from([1, 1, 1, 0, 2, 2**32 - 1]),
        config=st.sampled_from([{}, {"episode_length": 2}, {"n_actions": 2}, {"bogus": 1}]),
        token=st.one_of(st.none(), st.text(max_size=5)),
        resume=st.one_of(st.none(), st.none(), st.text(max_size=20)),
    ),
    st.builds(
        Reset,
        id=st.just(0),
        seed=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
        episode_id=st.one_of(st.none(), st.text(max_size=8)),
    ),
    st.builds(
        Step,
        id=st.just(0),
        action=st.one_of(st.integers(-3, 6), st.floats(-2, 5), st.lists(st.integers(0, 3))),
        obs=st.booleans(),
    ),
    st.builds(GetState, id=st.just(0)),
    st.builds(Snapshot, id=st.just(0)),
    st.builds(
        Restore,
        id=st.just(0),
        snapshot=st.one_of(st.binary(max_size=24), st.just(b"\x94\x01\x02\x03\xc0")),
    ),
    st.builds(Close, id=st.just(0)),
)

WS_VIOLATIONS = st.one_of(
    st.builds(lambda p: frame_bytes(OP_BINARY, p, mask=False), st.binary(max_size=20)),
    st.builds(
        lambda p, r: frame_bytes(OP_BINARY, p, rsv=r), st.binary(max_size=20), st.integers(1, 7)
    ),
    st.builds(
        lambda p, o: frame_bytes(o, p),
        st.binary(max_size=20),
        st.sampled_from([3, 4, 5, 6, 7, 11, 12, 13, 14, 15]),
    ),
    st.builds(lambda p: frame_bytes(OP_PING, p), st.binary(min_size=126, max_size=200)),
    st.builds(lambda p: frame_bytes(OP_PING, p, fin=False), st.binary(max_size=20)),
    st.builds(lambda p: frame_bytes(OP_CONT, p), st.binary(max_size=20)),
    st.builds(
        lambda a, b: frame_bytes(OP_BINARY, a, fin=False) + frame_bytes(OP_BINARY, b),
        st.binary(max_size=10),
        st.binary(max_size=10),
    ),
    st.builds(
        lambda c: frame_bytes(OP_CLOSE, c.to_bytes(2, "big")),
        st.sampled_from([0, 999, 1004, 1005, 1006, 1015, 2999, 5000]),
    ),
    st.builds(
        lambda r: frame_bytes(OP_CLOSE, b"\x03\xe8" + r),
        st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]),
    ),
)


# --------------------------------------------------------------------------- reference runs


def normalized(frame: Any) -> Any:
    """A comparable view of a server frame (random ids and tokens left out)."""
    if isinstance(frame, Opened):
        return ("opened", frame.id, frame.version, frame.spec)
    if isinstance(frame, Result):
        obs = None if frame.obs is None else (frame.obs.dtype.str, frame.obs.tobytes())
        return ("result", frame.id, obs, frame.reward, frame.done, frame.info)
    if isinstance(frame, StateReply):
        state = dict(frame.state)
        if state.get("episode_id") and len(str(state["episode_id"])) == 32:
            state["episode_id"] = "<server-chosen>"
        return ("state", frame.id, state)
    if isinstance(frame, Error):
        return ("error", frame.id, frame.code, frame.fatal, frame.message)
    return (frame.OP, frame.id)


def reference_replies(frames: list[bytes]) -> list[Any]:
    """What the server's session code answers in-process, without sockets."""
    registry = SessionRegistry(ServerLimits(max_frame_size=LIMIT, resume_grace=GRACE))
    session = SupervisedSession(
        Supervisor(fake_factory, registry), Link(None, authenticated=True, now=0)
    )
    out = []
    for data in frames:
        reply, close = session.handle(data)
        out.append(normalized(decode_server_frame(reply)))
        if close is not None:
            break
    session.close()
    return out


# --------------------------------------------------------------------------- healthy sessions


@dataclass
class Healthy:
    url: str
    seed: int
    stop: threading.Event
    steps: int = 0
    failure: BaseException | None = None

    def run(self) -> None:
        try:
            local = FakeEnvironment(HEALTHY)
            with EnvClient(self.url, config=HEALTHY, timeout=30 * UNIT) as env:
                while not self.stop.is_set():
                    r = env.reset(seed=self.seed + self.steps)
                    want = local.reset(seed=self.seed + self.steps)
                    assert np.array_equal(r.observation, want.obs)
                    for t in range(50):
                        r = env.step(t % 4)
                        want = local.step(t % 4)
                        assert np.array_equal(r.observation, want.obs) and r.info == want.info
                        self.steps += 1
                        time.sleep(0.002)  # steady traffic, leaving the CPU to the fuzzing
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc


# --------------------------------------------------------------------------- the test


@pytest.mark.slow
def test_fuzz_a_live_server(live: Live) -> None:
    tally = Tally()
    prober = Prober(live.url, tally)
    stop = threading.Event()
    healthy = [Healthy(live.url, seed, stop) for seed in (1, 2, 3)]
    threads = [threading.Thread(target=h.run) for h in healthy]
    for t in threads:
        t.start()
    share = max(1, TOTAL // 100)  # budget units: 1% of the frames

    @settings(max_examples=26 * share, **SETTINGS)
    @given(STATES, st.binary(max_size=200))
    def random_bytes(state: str, data: bytes) -> None:
        prober.probe(state, data)

    @settings(max_examples=26 * share, **SETTINGS)
    @given(STATES, maps)
    def random_maps(state: str, envelope: dict[Any, Any]) -> None:
        try:
            data = msgpack.packb(envelope, use_bin_type=True)
        except (OverflowError, TypeError, ValueError):
            data = msgpack.packb({"op": "step", "id": 1, "action": str(envelope)[:50]})
        prober.probe(state, data)

    @settings(max_examples=26 * share, **SETTINGS)
    @given(STATES, st.sampled_from(VALID), mutations)
    def mutated(state: str, valid: bytes, edits: list[tuple[str, int, int]]) -> None:
        prober.probe(state, mutate(valid, edits))

    @settings(max_examples=6 * share, **SETTINGS)
    @given(STATES, st.one_of(st.text(max_size=60).map(str.encode), st.binary(max_size=30)))
    def text(state: str, data: bytes) -> None:
        prober.probe(state, data, opcode=OP_TEXT)

    @settings(max_examples=4 * share, **SETTINGS)
    @given(STATES, WS_VIOLATIONS)
    def framing(state: str, data: bytes) -> None:
        prober.probe(state, data, raw=True)

    @settings(max_examples=max(5, share // 2), **SETTINGS)
    @given(STATES, st.integers(1, 4096), st.booleans())
    def oversize(state: str, extra: int, header_only: bool) -> None:
        if header_only:  # a length beyond the limit, and no payload at all
            prober.probe(state, frame_bytes(OP_BINARY, b"", length=LIMIT + extra)[:14], raw=True)
        else:
            prober.probe(state, b"\x00" * (LIMIT + extra))

    @settings(max_examples=5 * share, **SETTINGS)
    @given(st.lists(requests, min_size=1, max_size=8))
    def sequences(frames: list[Any]) -> None:
        data = []
        for i, frame in enumerate(frames, start=1):
            frame.id = i
            try:
                data.append(encode(frame))
            except ProtocolError:
                return
        want = reference_replies(data)
        prober.drop()
        with RawWS.to(live.url, timeout=10 * UNIT) as ws:
            for d in data:
                ws.send(d)
            tally.frames += len(data)
            got = []
            for _ in want:
                opcode, payload = ws.read_frame(10 * UNIT)
                while opcode in (OP_PING, OP_PONG):
                    opcode, payload = ws.read_frame(10 * UNIT)
                assert opcode == OP_BINARY, (opcode, payload)
                got.append(normalized(decode_server_frame(payload)))
        assert got == want

    try:
        for phase in (random_bytes, random_maps, mutated, text, framing, oversize, sequences):
            phase()
    finally:
        stop.set()
        for t in threads:
            t.join(60 * UNIT)
        prober.drop()
    print(
        f"\nfuzz: {tally.frames} frames; errors by code {dict(sorted(tally.errors.items()))}; "
        f"WebSocket-layer closes {tally.closes}; valid replies {tally.replies}; "
        f"healthy steps checked {sum(h.steps for h in healthy)}"
    )
    assert tally.frames >= TOTAL
    for h in healthy:
        assert h.failure is None, repr(h.failure)
        assert h.steps > 0
    assert live.proc.poll() is None, "the server process died"
    assert health(live.http)["status"] == "ok"
    wait_until(lambda: health(live.http)["sessions"] == 0, 10 * UNIT, what="no session left")
    logged = live.output()
    assert "Traceback" not in logged and "Exception in ASGI" not in logged, logged[-3000:]
