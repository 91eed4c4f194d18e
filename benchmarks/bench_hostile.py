"""Hostile traffic against a real server: its memory, ``/health`` and a neighbour's steps.

An ``openenv-ws serve --env atari`` subprocess (pinned to core 0 when there
are two) serves a *neighbour*: an honest Pong session driven by the sync
client in a process of its own (core 1), stepping back to back for the whole
run and timing every step. Attack phases follow one another on that server,
each from a process of its own (core 1, niced, connecting from
``--attacker-address`` so that a per-address limit can tell the attacker from
the neighbour). Every step the neighbour *starts* during a phase counts for
that phase:

- ``baseline``: no attack; every ratio divides by this row's figures;
- ``pong flood``: one connection writing 6-byte pongs, ``--burst-mib`` MiB
  per write, as fast as the server takes them;
- ``ping flood``: one connection sending empty pings as fast as it can,
  reading (and dropping) what comes back;
- ``cold opens``: a raw client opening sessions in a loop, each with a
  config no warm environment matches (the game cycled, ``max_episode_steps``
  never the same), closing each once answered;
- ``slowloris``: ``--slowloris`` connections, each trickling a never-ending
  upgrade request at ~1 byte/s (the attacker raises its descriptor limit to
  the hard limit; the server keeps what it inherits, or ``--server-nofile``
  sets its soft limit); meanwhile this process probes ``/health`` and
  tries new WebSocket handshakes, from 127.0.0.1 and from the attacker's
  address;
- ``ping flood, never read``: ``--flood-conns`` connections sending 125-byte
  pings and never reading; server RSS before and at its peak (the flood stops
  early if the server passes ``--rss-cap-mb``);
- ``after``: no attack again: did the server recover?

The neighbour steps in a closed loop: while it waits on a stalled step it
starts no other, so a few long stalls barely move p99. ``max ms`` and
``rate/base`` (its steps per second against the baseline's) show them.

Each attack ends by itself (a deadline; the attacker process is killed if it
overstays); connections the server ends are reopened, paced, until then. All
traffic goes to the server on 127.0.0.1. The issue's targets: RSS within
50 MB of baseline during a 60 s ping flood from 10 connections; the
neighbour's step p99 at 5 ms or less under the floods and the cold opens;
``/health`` answering throughout a 5,000-connection slowloris.

    python benchmarks/bench_hostile.py                  # 60 s flood, 30 s per other phase
    python benchmarks/bench_hostile.py --quick          # ~3 s per phase
    python benchmarks/bench_hostile.py --serve-args "--log-level warning" --json hostile.json
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import http.client
import json
import multiprocessing
import os
import queue
import resource
import selectors
import shlex
import socket
import struct
import subprocess
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import psutil

from benchmarks.measure import n_actions, pin_process
from openenv_ws.client import EnvClient
from openenv_ws.errors import ServerUnavailable
from openenv_ws.providers import LocalServerProvider

SERVER_CORE, CLIENT_CORE = 0, 1
OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 2, 8, 9, 10
#: Games the cold opens cycle through (every open also gets its own max_episode_steps).
COLD_GAMES = ("breakout", "space_invaders", "ms_pacman", "freeway", "seaquest", "qbert")
MB = 1 << 20

Target = tuple[str, int]


# ---------------------------------------------------------------- raw WebSocket bits


def client_frame(opcode: int, payload: bytes = b"") -> bytes:
    """One masked client frame (FIN set)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    key = os.urandom(4)
    masked = (
        np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(key, np.uint8), n)
    ).tobytes()
    return head + key + masked


def upgrade_request(target: Target) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /ws HTTP/1.1\r\nHost: {target[0]}:{target[1]}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def connect(target: Target, source: str, timeout: float) -> socket.socket:
    """A TCP connection to `target` from address `source` (port chosen by the kernel)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect(target)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def _error_name(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    return type(exc).__name__


def handshake(target: Target, source: str, timeout: float) -> tuple[str, socket.socket | None]:
    """Try a WebSocket upgrade: ("101", socket) or (what happened instead, None).

    What happened: ``HTTP <status>``, ``closed`` (no answer, the server ended
    the connection), ``reset``, ``refused`` or ``timeout``.
    """
    deadline = time.monotonic() + timeout
    try:
        sock = connect(target, source, timeout)
    except OSError as exc:
        return _error_name(exc), None
    try:
        sock.sendall(upgrade_request(target))
        head = b""
        while b"\r\n\r\n" not in head:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                return ("closed" if not head else _status(head)), None
            head += chunk
    except OSError as exc:
        sock.close()
        return _error_name(exc), None
    status = _status(head)
    if status != "101":
        sock.close()
        return status, None
    return "101", sock


def _status(head: bytes) -> str:
    """``101``, or ``HTTP 503`` and the like, from the start of an HTTP answer."""
    parts = head.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        return "garbage"
    code = parts[1].decode("latin-1")
    return code if code == "101" else f"HTTP {code}"


def read_server_frame(sock: socket.socket, buf: bytearray, deadline: float) -> tuple[int, bytes]:
    """The next (opcode, payload) from the server (unmasked frames); `buf` keeps the rest."""

    def need(n: int) -> None:
        while len(buf) < n:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            buf.extend(chunk)

    need(2)
    opcode, n, start = buf[0] & 0x0F, buf[1] & 0x7F, 2
    if n == 126:
        need(4)
        n, start = struct.unpack_from("!H", buf, 2)[0], 4
    elif n == 127:
        need(10)
        n, start = struct.unpack_from("!Q", buf, 2)[0], 10
    need(start + n)
    payload = bytes(buf[start : start + n])
    del buf[: start + n]
    return opcode, payload


def close_code(data: bytes) -> int | None:
    """The code of a close frame in `data` (server frames; only pongs of empty pings precede it)."""
    at = data.rfind(b"\x88")
    if at < 0 or at + 1 >= len(data):
        return None
    n = data[at + 1] & 0x7F
    return struct.unpack_from("!H", data, at + 2)[0] if n >= 2 and at + 4 <= len(data) else 1005


# ---------------------------------------------------------------- attacks (each in its own process)


@dataclass
class _Conn:
    sock: socket.socket | None = None
    offset: int = 0
    reopen_at: float = 0.0


def control_flood(
    target: Target,
    source: str,
    *,
    stop: Event,
    seconds: float,
    opcode: int,
    payload: bytes,
    frames_per_write: int,
    conns: int,
    read: bool,
) -> dict[str, Any]:
    """`conns` connections writing control frames as fast as the server takes them.

    With `read`, what the server sends is read and dropped (a close frame's
    code is noted); without, nothing is ever read. A connection the server
    ends is reopened 0.2 s later.
    """
    chunk = client_frame(opcode, payload) * frames_per_write
    view = memoryview(chunk)
    frame_size = len(chunk) // frames_per_write
    sel = selectors.DefaultSelector()
    slots = [_Conn() for _ in range(conns)]
    ends: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[int] = collections.Counter()
    sent = opened = 0
    deadline = time.monotonic() + seconds

    def end(slot: _Conn, why: str) -> None:
        assert slot.sock is not None
        sel.unregister(slot.sock)
        slot.sock.close()
        slot.sock, slot.offset, slot.reopen_at = None, 0, time.monotonic() + 0.2
        ends[why] += 1

    while not stop.is_set() and (now := time.monotonic()) < deadline:
        for slot in slots:
            left = deadline - time.monotonic()
            if slot.sock is None and now >= slot.reopen_at and left > 0:
                what, sock = handshake(target, source, min(5.0, max(0.1, left)))
                if sock is None:
                    refused[what] += 1
                    slot.reopen_at = time.monotonic() + 0.2
                    continue
                opened += 1
                sock.setblocking(False)
                slot.sock = sock
                events = selectors.EVENT_WRITE | (selectors.EVENT_READ if read else 0)
                sel.register(sock, events, slot)
        if not sel.get_map():
            stop.wait(0.05)
            continue
        for key, events in sel.select(timeout=min(0.1, max(0.0, deadline - time.monotonic()))):
            slot = key.data
            sock = slot.sock
            try:
                if events & selectors.EVENT_READ:
                    data = sock.recv(1 << 16)
                    if not data:
                        end(slot, "closed")
                        continue
                    if (code := close_code(data[-256:])) is not None:
                        codes[code] += 1
                if events & selectors.EVENT_WRITE:
                    n = sock.send(view[slot.offset :])
                    sent += n
                    slot.offset = (slot.offset + n) % len(chunk)
            except BlockingIOError:
                pass
            except OSError as exc:
                end(slot, _error_name(exc))
    for slot in slots:
        if slot.sock is not None:
            slot.sock.close()
    sel.close()
    return {
        "sent_mib": sent / MB,
        "frames": sent // frame_size,
        "connections": opened,
        "ended_by_server": dict(ends),
        "close_codes": {str(k): v for k, v in codes.items()},
        "handshakes_refused": dict(refused),
    }


def cold_opens(
    target: Target,
    source: str,
    *,
    stop: Event,
    seconds: float,
    timeout: float,
) -> dict[str, Any]:
    """Open a session with a config no warm environment matches, close it; repeat."""
    outcomes: collections.Counter[str] = collections.Counter()
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    i = 0
    while not stop.is_set() and (now := time.monotonic()) < deadline:
        config = {"game": COLD_GAMES[i % len(COLD_GAMES)], "max_episode_steps": 100_000 + i}
        i += 1
        start = time.perf_counter()
        what, sock = handshake(target, source, min(timeout, max(0.1, deadline - now)))
        if sock is None:
            outcomes[what] += 1
            stop.wait(0.05)
            continue
        try:
            frame = {"op": "open", "id": 1, "version": 1, "config": config}
            sock.sendall(client_frame(OP_BINARY, msgpack.packb(frame)))
            buf, until = bytearray(), time.monotonic() + timeout
            while True:
                opcode, data = read_server_frame(sock, buf, until)
                if opcode == OP_BINARY:
                    reply = msgpack.unpackb(data, raw=False, strict_map_key=False)
                    op = reply.get("op")
                    outcomes["opened" if op == "opened" else f"{op} {reply.get('code')}"] += 1
                    latencies.append(time.perf_counter() - start)
                    break
                if opcode == OP_CLOSE:
                    code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                    outcomes[f"close {code}"] += 1
                    break
            sock.sendall(client_frame(OP_CLOSE, struct.pack("!H", 1000)))
        except EOFError:
            outcomes["closed"] += 1
        except OSError as exc:
            outcomes[_error_name(exc)] += 1
        finally:
            sock.close()
    ms = np.array(latencies) * 1e3
    return {
        "attempts": i,
        "outcomes": dict(outcomes),
        "open_ms_p50": float(np.percentile(ms, 50)) if len(ms) else None,
        "open_ms_max": float(ms.max()) if len(ms) else None,
    }


def slowloris(
    target: Target,
    source: str,
    *,
    stop: Event,
    seconds: float,
    count: int,
    rate: float,
) -> dict[str, Any]:
    """`count` connections trickling an upgrade request that never ends, `rate` bytes/s each.

    A connection the server ends is opened again a second later (as a patient attacker would).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    count = min(count, max(1, limit - 64))
    head = upgrade_request(target).removesuffix(b"\r\n\r\n") + b"\r\n"
    pad = b"X-Pad: a\r\n"  # header lines for as long as it takes: the blank line never comes
    period = 1.0 / rate
    sel = selectors.DefaultSelector()
    sent: dict[socket.socket, int] = {}
    due: collections.deque[tuple[float, socket.socket]] = collections.deque()
    reopen: collections.deque[float] = collections.deque()
    answers: collections.Counter[str] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    connected = peak = attempts = 0
    start = time.monotonic()
    deadline = start + seconds
    peak_at = 0.0

    def open_one() -> None:
        nonlocal attempts
        attempts += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.bind((source, 0))
            err = sock.connect_ex(target)
        except OSError as exc:
            sock.close()
            failures[_error_name(exc)] += 1
            reopen.append(time.monotonic() + 1.0)
            return
        if err not in (0, 115):  # EINPROGRESS
            sock.close()
            failures[os.strerror(err)] += 1
            reopen.append(time.monotonic() + 1.0)
            return
        sel.register(sock, selectors.EVENT_WRITE, "connecting")

    def drop(sock: socket.socket, why: str, counter: collections.Counter[str]) -> None:
        nonlocal connected
        if sent.pop(sock, None) is not None:
            connected -= 1
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        sock.close()
        counter[why] += 1
        reopen.append(time.monotonic() + 1.0)

    for _ in range(count):
        if stop.is_set() or time.monotonic() >= deadline:
            break
        open_one()
    while not stop.is_set() and (now := time.monotonic()) < deadline:
        while reopen and reopen[0] <= now and attempts < count * 20:
            reopen.popleft()
            open_one()
        while due and due[0][0] <= now:
            _, sock = due.popleft()
            if sock not in sent:
                continue
            i = sent[sock]
            stream = head if i < len(head) else pad
            j = i if i < len(head) else (i - len(head)) % len(pad)
            try:
                sock.send(stream[j : j + 1])
            except BlockingIOError:
                pass
            except OSError as exc:
                drop(sock, _error_name(exc), answers)
                continue
            sent[sock] = i + 1
            due.append((now + period, sock))
        wait = min(0.05, max(0.0, deadline - now))
        if due:
            wait = min(wait, max(0.0, due[0][0] - now))
        for key, _ in sel.select(timeout=wait):
            sock = key.fileobj  # type: ignore[assignment]
            if key.data == "connecting":
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    sel.unregister(sock)
                    sock.close()
                    failures[os.strerror(err)] += 1
                    reopen.append(time.monotonic() + 1.0)
                    continue
                sel.modify(sock, selectors.EVENT_READ, "held")
                sent[sock] = 0
                connected += 1
                if connected > peak:
                    peak, peak_at = connected, time.monotonic() - start
                due.append((time.monotonic(), sock))
                continue
            try:
                data = sock.recv(4096)
            except OSError as exc:
                drop(sock, _error_name(exc), answers)
                continue
            drop(sock, _status(data) if data else "closed", answers)
    held = connected
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    sel.close()
    return {
        "target": count,
        "nofile_limit": limit,
        "peak_connected": peak,
        "peak_after_s": peak_at,
        "connected_at_end": held,
        "connect_attempts": attempts,
        "ended_by_server": dict(answers),
        "connect_failures": dict(failures),
    }


ATTACKS: dict[str, Callable[..., dict[str, Any]]] = {
    "control_flood": control_flood,
    "cold_opens": cold_opens,
    "slowloris": slowloris,
}


def attack_process(
    kind: str,
    target: Target,
    source: str,
    kwargs: dict[str, Any],
    stop: Event,
    results: multiprocessing.Queue[dict[str, Any]],
    cores: set[int] | None,
) -> None:
    if cores:
        os.sched_setaffinity(0, cores)
    with contextlib.suppress(OSError):
        os.nice(10)  # the neighbour shares this core: its wake-ups come first
    try:
        stats = ATTACKS[kind](target, source, stop=stop, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        stats = {"error": f"{type(exc).__name__}: {exc}"}
    results.put(stats)


# ---------------------------------------------------------------- the neighbour


def neighbour_process(
    url: str,
    timeout: float,
    stop: Event,
    ready: Event,
    inflight: Synchronized,  # type: ignore[type-arg]
    last_done: Synchronized,  # type: ignore[type-arg]
    results: multiprocessing.Queue[tuple[bytes, bytes, list[tuple[float, str]]]],
    cores: set[int] | None,
) -> None:
    """Step Pong back to back until `stop`; every step's (start, seconds); reconnect on errors."""
    if cores:
        os.sched_setaffinity(0, cores)
    starts, seconds = array("d"), array("d")
    errors: list[tuple[float, str]] = []
    rng = np.random.default_rng(0)
    clock = time.monotonic
    while not stop.is_set():
        try:
            env: EnvClient[Any] = EnvClient(
                url, config={"game": "pong"}, timeout=timeout, open_timeout=timeout, resume=False
            )
            with env:
                env.reset(seed=0)
                actions = rng.integers(0, n_actions(env.spec.action), 4096).tolist()
                ready.set()
                i = 0
                while not stop.is_set():
                    t0 = clock()
                    inflight.value = t0
                    done = env.step(actions[i % 4096]).done
                    t1 = clock()
                    inflight.value = 0.0
                    last_done.value = t1
                    starts.append(t0)
                    seconds.append(t1 - t0)
                    i += 1
                    if done:
                        env.reset()
        except Exception as exc:  # noqa: BLE001 - counted per phase
            inflight.value = 0.0
            errors.append((clock(), f"{type(exc).__name__}: {exc}"[:200]))
            ready.set()
            stop.wait(0.5)
    results.put((starts.tobytes(), seconds.tobytes(), errors))


# ---------------------------------------------------------------- the run


@dataclass
class Phase:
    key: str
    label: str
    seconds: float
    kind: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class PhaseResult:
    phase: Phase
    t0: float
    t1: float
    rss_before: float
    rss_peak: float
    attack: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)


class RssSampler:
    """The server's RSS (with its worker processes) every 0.1 s, on a thread."""

    def __init__(self, pid: int, cap: float) -> None:
        self.process = psutil.Process(pid)
        self.cap = cap
        self.samples: list[tuple[float, float]] = []
        self.over_cap = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> float:
        try:
            total = float(self.process.memory_info().rss)
            for child in self.process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        except psutil.Error:
            return float("nan")
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            value = self.rss()
            self.samples.append((time.monotonic(), value))
            if value > self.cap:
                self.over_cap.set()

    def peak(self, t0: float, t1: float) -> float:
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        return max(inside, default=float("nan"))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def health_ms(host: str, port: int, timeout: float) -> tuple[str, float]:
    """(``200`` or what went wrong, milliseconds) for one ``GET /health``."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        reply = conn.getresponse()
        reply.read()
        what = str(reply.status)
    except (OSError, http.client.HTTPException) as exc:
        what = _error_name(exc)
    finally:
        conn.close()
    return what, (time.perf_counter() - start) * 1e3


def probe(target: Target, attacker: str, until: float, stop: threading.Event) -> dict[str, Any]:
    """``/health`` every 0.25 s and a new handshake every 0.5 s (alternating source addresses)."""
    health: list[tuple[str, float]] = []
    clients: dict[str, collections.Counter[str]] = {
        "127.0.0.1": collections.Counter(),
        attacker: collections.Counter(),
    }

    def health_loop() -> None:
        while not stop.is_set() and time.monotonic() < until:
            health.append(health_ms(*target, timeout=2.0))
            stop.wait(0.25)

    def client_loop() -> None:
        sources = list(clients)
        i = 0
        while not stop.is_set() and time.monotonic() < until:
            source = sources[i % len(sources)]
            what, sock = handshake(target, source, 2.0)
            if sock is not None:
                sock.close()
            clients[source][what] += 1
            i += 1
            stop.wait(0.5)

    threads = [threading.Thread(target=f, daemon=True) for f in (health_loop, client_loop)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()) + 5)
    answered = [ms for what, ms in health if what == "200"]
    return {
        "health_probes": len(health),
        "health_answered": len(answered),
        "health_failures": dict(collections.Counter(w for w, _ in health if w != "200")),
        "health_ms_p50": float(np.percentile(answered, 50)) if answered else None,
        "health_ms_p99": float(np.percentile(answered, 99)) if answered else None,
        "health_ms_max": max(answered, default=None),
        "new_clients": {source: dict(c) for source, c in clients.items()},
    }


class Bench:
    """One server, one neighbour, the phases in order."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = multiprocessing.get_context("spawn")
        two = len(os.sched_getaffinity(0)) >= 2 and not args.no_pin
        self.server_cores = {SERVER_CORE} if two else None
        self.client_cores = {CLIENT_CORE} if two else None
        self.serve_args = ["--env", "atari", *shlex.split(args.serve_args)]
        self.server = LocalServerProvider(args=self.serve_args, stop_timeout=5.0)
        self.stop_neighbour = self.ctx.Event()
        self.ready = self.ctx.Event()
        self.inflight = self.ctx.Value("d", 0.0)
        self.last_done = self.ctx.Value("d", 0.0)
        self.neighbour_results: multiprocessing.Queue[Any] = self.ctx.Queue()
        self.neighbour: Any = None
        self.sampler: RssSampler | None = None

    @property
    def target(self) -> Target:
        assert self.server.port is not None
        return (self.server.host, self.server.port)

    def start(self) -> None:
        self.server.start()
        assert self.server.pid is not None
        if self.server_cores:
            pin_process(self.server.pid, self.server_cores)
        if self.args.server_nofile:
            server = psutil.Process(self.server.pid)
            for process in [server, *server.children(recursive=True)]:
                hard = process.rlimit(psutil.RLIMIT_NOFILE)[1]
                process.rlimit(psutil.RLIMIT_NOFILE, (min(self.args.server_nofile, hard), hard))
        self.sampler = RssSampler(self.server.pid, self.args.rss_cap_mb * MB)
        self.neighbour = self.ctx.Process(
            target=neighbour_process,
            args=(
                self.server.url,
                self.args.step_timeout,
                self.stop_neighbour,
                self.ready,
                self.inflight,
                self.last_done,
                self.neighbour_results,
                self.client_cores,
            ),
            daemon=True,
        )
        self.neighbour.start()
        if not self.ready.wait(60):
            raise RuntimeError("the neighbour session did not start within 60 s")

    def finish(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[tuple[float, str]]]:
        """Stop the neighbour and the server; the neighbour's (starts, seconds, errors)."""
        self.stop_neighbour.set()
        got: Any = None
        if self.neighbour is not None:
            with contextlib.suppress(queue.Empty):
                got = self.neighbour_results.get(timeout=self.args.step_timeout + 10)
        if self.neighbour is not None:
            self.neighbour.join(5)
            if self.neighbour.is_alive():
                self.neighbour.kill()
                self.neighbour.join(5)
        if self.sampler is not None:
            self.sampler.stop()
        self.server.stop()
        if got is None:
            return np.empty(0), np.empty(0), [(time.monotonic(), "the neighbour sent no results")]
        starts, seconds, errors = got
        return np.frombuffer(starts), np.frombuffer(seconds), errors

    def server_alive(self) -> bool:
        process = self.server.process
        return process is not None and process.poll() is None

    def settle(self, timeout: float) -> list[str]:
        """Wait until /health answers, the pool is full and the neighbour steps; what did not."""
        deadline = time.monotonic() + timeout
        missing = ["/health", "warm pool", "neighbour steps"]
        while time.monotonic() < deadline and missing and self.server_alive():
            missing = []
            body = self.server.health(timeout=2.0)
            if body is None:
                missing.append("/health")
            elif (pool := body.get("pool")) and pool["ready"] < pool["size"] * max(
                1, pool["configs"]
            ):
                missing.append("warm pool")
            if time.monotonic() - self.last_done.value > 0.5:
                missing.append("neighbour steps")
            if missing:
                time.sleep(0.1)
        return [f"not settled before it ({', '.join(missing)})"] if missing else []

    def run_phase(self, phase: Phase) -> PhaseResult:
        assert self.sampler is not None
        notes = self.settle(self.args.settle_timeout)
        rss_before = self.sampler.rss()
        self.sampler.over_cap.clear()
        stop = self.ctx.Event()
        results: multiprocessing.Queue[dict[str, Any]] = self.ctx.Queue()
        attacker = None
        probes: dict[str, Any] = {}
        prober: threading.Thread | None = None
        t0 = time.monotonic()
        until = t0 + phase.seconds
        if phase.kind is not None:
            attacker = self.ctx.Process(
                target=attack_process,
                args=(
                    phase.kind,
                    self.target,
                    self.args.attacker_address,
                    {"seconds": phase.seconds, **phase.kwargs},
                    stop,
                    results,
                    self.client_cores,
                ),
                daemon=True,
            )
            attacker.start()
        if phase.key == "slowloris":
            probe_stop = threading.Event()

            def run_probes() -> None:
                probes.update(probe(self.target, self.args.attacker_address, until, probe_stop))

            prober = threading.Thread(target=run_probes, daemon=True)
            prober.start()
        while time.monotonic() < until:
            if attacker is not None and not attacker.is_alive():
                break
            if self.sampler.over_cap.is_set():
                notes.append(
                    f"stopped at the RSS cap ({self.args.rss_cap_mb} MB) after "
                    f"{time.monotonic() - t0:.1f} s"
                )
                break
            if not self.server_alive():
                notes.append(f"the server died after {time.monotonic() - t0:.1f} s")
                break
            time.sleep(0.05)
        stop.set()
        t1 = time.monotonic()
        attack: dict[str, Any] = {}
        if attacker is not None:
            with contextlib.suppress(queue.Empty):
                attack = results.get(timeout=15)
            attacker.join(5)
            if attacker.is_alive():
                attacker.kill()
                attacker.join(5)
                notes.append("the attacker overstayed and was killed")
        if prober is not None:
            probe_stop.set()
            prober.join(10)
        rss_peak = self.sampler.peak(t0, time.monotonic())
        # A step that started in the window and stalls past it still counts for it.
        wait_until = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < wait_until and self.server_alive():
            pending = self.inflight.value
            if self.last_done.value > t1 and (pending == 0.0 or pending >= t1):
                break
            time.sleep(0.02)
        else:
            pending = self.inflight.value
            if pending and pending < t1:
                notes.append(
                    f"a step started in the window was still waiting "
                    f"{time.monotonic() - pending:.1f} s later"
                )
        return PhaseResult(phase, t0, t1, rss_before, rss_peak, attack, notes, probes)


def phases(args: argparse.Namespace) -> list[Phase]:
    every = {
        "baseline": Phase("baseline", "baseline (no attack)", args.seconds),
        "pong": Phase(
            "pong",
            f"pong flood, {args.burst_mib:g} MiB writes",
            args.seconds,
            "control_flood",
            {
                "opcode": OP_PONG,
                "payload": b"",
                "frames_per_write": int(args.burst_mib * MB) // 6,
                "conns": 1,
                "read": True,
            },
        ),
        "ping": Phase(
            "ping",
            "ping flood, 1 conn, reads",
            args.seconds,
            "control_flood",
            {"opcode": OP_PING, "payload": b"", "frames_per_write": 4096, "conns": 1, "read": True},
        ),
        "opens": Phase(
            "opens", "cold opens, 1 raw client", args.seconds, "cold_opens", {"timeout": 10.0}
        ),
        "slowloris": Phase(
            "slowloris",
            f"slowloris, {args.slowloris} conns",
            args.seconds,
            "slowloris",
            {"count": args.slowloris, "rate": args.trickle_rate},
        ),
        "flood": Phase(
            "flood",
            f"ping flood, {args.flood_conns} conns, never read",
            args.flood_seconds,
            "control_flood",
            {
                "opcode": OP_PING,
                "payload": b"x" * 125,
                "frames_per_write": 512,
                "conns": args.flood_conns,
                "read": False,
            },
        ),
        "after": Phase("after", "after (no attack)", args.seconds),
    }
    keys = ["baseline", *(k for k in args.phases.split(",") if k and k != "baseline")]
    unknown = [k for k in keys if k not in every]
    if unknown:
        raise SystemExit(f"unknown phase(s) {unknown}; choose from {', '.join(every)}")
    return [every[k] for k in keys]


def _pct(ms: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(ms, q)) if len(ms) else float("nan")


def summarize(
    results: list[PhaseResult],
    starts: np.ndarray[Any, Any],
    seconds: np.ndarray[Any, Any],
    errors: list[tuple[float, str]],
) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        inside = (starts >= r.t0) & (starts < r.t1)
        ms = seconds[inside] * 1e3
        errs = [e for t, e in errors if r.t0 <= t < r.t1 + 1.0]
        rows.append(
            {
                "phase": r.phase.key,
                "label": r.phase.label,
                "seconds": r.t1 - r.t0,
                "steps": int(inside.sum()),
                "p50_ms": _pct(ms, 50),
                "p99_ms": _pct(ms, 99),
                "max_ms": float(ms.max()) if len(ms) else float("nan"),
                "errors": errs,
                "rss_before_mb": r.rss_before / MB,
                "rss_peak_mb": r.rss_peak / MB,
                "attack": r.attack,
                "probes": r.probes,
                "notes": r.notes,
            }
        )
    return rows


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(rows: list[dict[str, Any]], header: str) -> None:
    """The table (ratios to the first row, the baseline), then each phase's details."""
    base = rows[0]
    base_rate = _ratio(base["steps"], base["seconds"])
    print(header)
    print(
        f"{'phase':<34} {'s':>5} {'steps':>6} {'p50 ms':>7} {'p99 ms':>8} {'max ms':>8} "
        f"{'p50/base':>8} {'p99/base':>8} {'rate/base':>9} {'errors':>6} {'RSS MB':>7} "
        f"{'peak MB':>8}"
    )
    for row in rows:
        rate = _ratio(row["steps"], row["seconds"])
        print(
            f"{row['label']:<34} {row['seconds']:5.1f} {row['steps']:6d} {row['p50_ms']:7.2f} "
            f"{row['p99_ms']:8.2f} {row['max_ms']:8.1f} "
            f"{_ratio(row['p50_ms'], base['p50_ms']):8.2f} "
            f"{_ratio(row['p99_ms'], base['p99_ms']):8.2f} {_ratio(rate, base_rate):9.2f} "
            f"{len(row['errors']):6d} {row['rss_before_mb']:7.0f} {row['rss_peak_mb']:8.0f}"
        )
    print()
    for row in rows:
        details = []
        attack, probes = row["attack"], row["probes"]
        if "error" in attack:
            details.append(f"the attacker failed: {attack['error']}")
        elif "sent_mib" in attack:
            details.append(
                f"{attack['sent_mib']:.1f} MiB sent ({attack['frames']} frames) over "
                f"{attack['connections']} connection(s); ended by the server: "
                f"{attack['ended_by_server'] or 'none'}; close codes read: "
                f"{attack['close_codes'] or 'none'}; handshakes refused: "
                f"{attack['handshakes_refused'] or 'none'}"
            )
        elif "attempts" in attack:
            rate = attack["attempts"] / row["seconds"] if row["seconds"] else 0.0
            p50 = attack["open_ms_p50"]
            details.append(
                f"{attack['attempts']} opens ({rate:.1f}/s): {attack['outcomes']}; "
                f"open p50 {p50 if p50 is None else round(p50, 1)} ms, "
                f"max {attack['open_ms_max'] and round(attack['open_ms_max'], 1)} ms"
            )
        elif "peak_connected" in attack:
            details.append(
                f"held {attack['peak_connected']}/{attack['target']} at peak "
                f"({attack['peak_after_s']:.1f} s in), {attack['connected_at_end']} at the end; "
                f"ended by the server: {attack['ended_by_server'] or 'none'}; "
                f"connect failures: {attack['connect_failures'] or 'none'}"
            )
        if probes:
            n, ok = probes["health_probes"], probes["health_answered"]
            frac = 100.0 * ok / n if n else 0.0
            lat = (
                f"latency p50 {probes['health_ms_p50']:.1f} / p99 {probes['health_ms_p99']:.1f} "
                f"/ max {probes['health_ms_max']:.1f} ms"
                if ok
                else "no answer"
            )
            details.append(
                f"/health answered {ok}/{n} ({frac:.1f}%), {lat}; failures: "
                f"{probes['health_failures'] or 'none'}"
            )
            for source, got in probes["new_clients"].items():
                details.append(f"new clients from {source}: {got}")
        if row["phase"] == "flood":
            growth = row["rss_peak_mb"] - row["rss_before_mb"]
            details.append(
                f"server RSS {row['rss_before_mb']:.0f} MB before, peak {row['rss_peak_mb']:.0f}"
                f" MB (+{growth:.0f} MB; target +50 MB at most)"
            )
        if row["errors"]:
            details.append(f"neighbour errors: {row['errors'][:3]}")
        details += row["notes"]
        if details:
            print(f"{row['label']}:")
            for line in details:
                print(f"  {line}")


def _source_usable(address: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            return False
    return True


def _revision() -> str:
    """The commit of the tree the server runs from (``-dirty`` with changes not committed)."""
    import openenv_ws

    try:
        return subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(openenv_ws.__file__).resolve().parent.parent,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~3 s per phase (a smoke run)")
    parser.add_argument("--seconds", type=float, help="seconds per phase (default 30)")
    parser.add_argument(
        "--flood-seconds", type=float, help="seconds of the never-read ping flood (default 60)"
    )
    parser.add_argument("--flood-conns", type=int, default=10)
    parser.add_argument("--burst-mib", type=float, default=4.0, help="MiB per pong-flood write")
    parser.add_argument("--slowloris", type=int, default=5000, help="slowloris connections")
    parser.add_argument("--trickle-rate", type=float, default=1.0, help="bytes/s per connection")
    parser.add_argument(
        "--phases",
        default="pong,ping,opens,slowloris,flood,after",
        help="comma-separated phases after the baseline",
    )
    parser.add_argument(
        "--attacker-address",
        default="127.0.0.2",
        help="loopback source address of the attack (127.0.0.1 if it cannot be bound)",
    )
    parser.add_argument("--rss-cap-mb", type=float, default=4096.0, help="stop a flood here")
    parser.add_argument("--serve-args", default="", help="more `openenv-ws serve` options")
    parser.add_argument("--step-timeout", type=float, help="neighbour's request timeout, s")
    parser.add_argument("--settle-timeout", type=float, help="seconds to wait between phases")
    parser.add_argument(
        "--server-nofile",
        type=int,
        help="the server's RLIMIT_NOFILE soft limit (default: what it inherits)",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin to cores 0 and 1")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    quick = args.quick
    args.seconds = args.seconds or (3.0 if quick else 30.0)
    args.flood_seconds = args.flood_seconds or (3.0 if quick else 60.0)
    args.step_timeout = args.step_timeout or (10.0 if quick else 30.0)
    args.settle_timeout = args.settle_timeout or (10.0 if quick else 30.0)
    if not _source_usable(args.attacker_address):
        args.attacker_address = "127.0.0.1"
    plan = phases(args)

    bench = Bench(args)
    results: list[PhaseResult] = []
    try:
        try:
            bench.start()
        except (ServerUnavailable, RuntimeError) as exc:
            raise SystemExit(f"bench_hostile: could not start: {exc}") from None
        assert bench.server.pid is not None
        limits = psutil.Process(bench.server.pid).rlimit(psutil.RLIMIT_NOFILE)
        for phase in plan:
            if not bench.server_alive():
                break
            results.append(bench.run_phase(phase))
    finally:
        starts, seconds, errors = bench.finish()
    skipped = [p.label for p in plan[len(results) :]]
    rows = summarize(results, starts, seconds, errors)
    header = (
        f"openenv-ws serve {shlex.join(bench.serve_args)} at {_revision()}; server "
        f"RLIMIT_NOFILE {limits[0]}/{limits[1]}; attacker from {args.attacker_address}; "
        f"neighbour: pong, sync client, back to back"
        + (
            f"; server on core {SERVER_CORE}, clients on core {CLIENT_CORE}"
            if bench.server_cores
            else ""
        )
    )
    report(rows, header)
    if skipped:
        print(f"not run (the server was gone): {', '.join(skipped)}")
    if args.json:
        args.json.write_text(json.dumps({"header": header, "phases": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
