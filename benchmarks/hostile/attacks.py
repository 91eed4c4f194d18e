"""The attacks, each run in a process of its own until its deadline or its stop event."""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import resource
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import msgpack
import numpy as np

from openenv_ws.protocol import Result, decode_server_frame
from openenv_ws.wire.framing import FrameError, FrameReader, close_payload, parse_close

from .rawwire import (
    MB,
    OP_BINARY,
    OP_CLOSE,
    Target,
    client_frame,
    close_code,
    error_name,
    handshake,
    http_status,
    read_server_frame,
    upgrade_request,
)

__all__ = [
    "ATTACKS",
    "attack_process",
    "cold_opens",
    "control_flood",
    "heavy_sessions",
    "slowloris",
    "vector_opens",
]

#: The vector sessions the ``vector`` phase opens and resets in a loop (a ROM load an env).
VECTOR_CONFIG = {"game": "pong", "obs_type": "grayscale", "img_height": 84, "img_width": 84}
VECTOR_ENVS = 64
#: The heaviest preprocessing Atari allows (16 MiB observations, 1,000 no-ops a reset).
HEAVY_CONFIG = {
    "game": "pong",
    "obs_type": "grayscale",
    "img_height": 1024,
    "img_width": 1024,
    "stack_num": 16,
    "noop_max": 1000,
    "frameskip": 1,
}

#: Games the cold opens cycle through (every open also gets its own max_episode_steps).
COLD_GAMES = ("breakout", "space_invaders", "ms_pacman", "freeway", "seaquest", "qbert")


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
                end(slot, error_name(exc))
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
            reader, until = FrameReader(masked=False), time.monotonic() + timeout
            while True:
                got = read_server_frame(sock, reader, until)
                opcode, data = got.opcode, got.payload
                if opcode == OP_BINARY:
                    reply = msgpack.unpackb(data, raw=False, strict_map_key=False)
                    op = reply.get("op")
                    outcomes["opened" if op == "opened" else f"{op} {reply.get('code')}"] += 1
                    latencies.append(time.perf_counter() - start)
                    break
                if opcode == OP_CLOSE:
                    outcomes[f"close {parse_close(data)[0]}"] += 1
                    break
            sock.sendall(client_frame(OP_CLOSE, close_payload(1000)))
        except EOFError:
            outcomes["closed"] += 1
        except FrameError as exc:
            outcomes[f"bad frame ({exc.code})"] += 1
        except OSError as exc:
            outcomes[error_name(exc)] += 1
        finally:
            sock.close()
    ms = np.array(latencies) * 1e3
    return {
        "attempts": i,
        "outcomes": dict(outcomes),
        "open_ms_p50": float(np.percentile(ms, 50)) if len(ms) else None,
        "open_ms_max": float(ms.max()) if len(ms) else None,
    }


def _ask(sock: socket.socket, reader: FrameReader, frame: dict[str, Any], until: float) -> Any:
    """Send `frame`, return the server's next binary reply decoded (EOFError on a close)."""
    sock.sendall(client_frame(OP_BINARY, msgpack.packb(frame)))
    return _unpack(_message(sock, reader, until))


def _message(sock: socket.socket, reader: FrameReader, until: float) -> bytes:
    """The server's next binary message, its fragments joined (EOFError on a close)."""
    parts: list[bytes] = []
    while True:
        got = read_server_frame(sock, reader, until)
        if got.opcode == OP_CLOSE:
            raise EOFError(f"close {parse_close(got.payload)[0]}")
        if got.opcode == OP_BINARY or (parts and got.opcode == 0):  # 0: a continuation
            parts.append(got.payload)
            if got.fin:
                return b"".join(parts)


def _unpack(payload: bytes) -> Any:
    """The frame's map (a ``result`` may carry its observation's bytes after it)."""
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except msgpack.ExtraData as extra:
        return extra.unpacked


def vector_opens(
    target: Target,
    source: str,
    *,
    stop: Event,
    seconds: float,
    timeout: float,
) -> dict[str, Any]:
    """Open a vector session of VECTOR_ENVS envs, reset it, close it; repeat."""
    outcomes: collections.Counter[str] = collections.Counter()
    cycles: list[float] = []
    deadline = time.monotonic() + seconds
    while not stop.is_set() and (now := time.monotonic()) < deadline:
        start = time.perf_counter()
        what, sock = handshake(target, source, min(timeout, max(0.1, deadline - now)))
        if sock is None:
            outcomes[what] += 1
            stop.wait(0.05)
            continue
        try:
            reader, until = FrameReader(masked=False), deadline + timeout
            open_frame = {"op": "open", "id": 1, "version": 1, "config": VECTOR_CONFIG}
            opened = _ask(sock, reader, {**open_frame, "num_envs": VECTOR_ENVS}, until)
            if opened.get("op") != "opened":
                outcomes[f"{opened.get('op')} {opened.get('code')}"] += 1
                continue
            batch = _ask(sock, reader, {"op": "reset", "id": 2}, until)
            outcomes["reset" if batch.get("op") == "batch" else f"reset {batch.get('code')}"] += 1
            cycles.append(time.perf_counter() - start)
            sock.sendall(client_frame(OP_CLOSE, close_payload(1000)))
        except EOFError as exc:
            outcomes[str(exc) or "closed"] += 1
        except FrameError as exc:
            outcomes[f"bad frame ({exc.code})"] += 1
        except OSError as exc:
            outcomes[error_name(exc)] += 1
        finally:
            sock.close()
    return {
        "cycles": len(cycles),
        "outcomes": dict(outcomes),
        "cycle_s_max": max(cycles) if cycles else None,
    }


def heavy_sessions(
    target: Target,
    source: str,
    *,
    stop: Event,
    seconds: float,
    timeout: float,
    count: int,
) -> dict[str, Any]:
    """`count` sessions of HEAVY_CONFIG stepping (no observation), a reset when one ends."""
    outcomes: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + seconds
    conns: list[tuple[socket.socket, FrameReader]] = []
    steps = 0
    try:
        for _ in range(count):
            what, sock = handshake(target, source, timeout)
            if sock is None:
                outcomes[what] += 1
                continue
            reader, until = FrameReader(masked=False), time.monotonic() + timeout
            open_frame = {"op": "open", "id": 1, "version": 1, "config": HEAVY_CONFIG}
            opened = _ask(sock, reader, open_frame, until)
            outcomes[str(opened.get("op"))] += 1
            if opened.get("op") != "opened":
                sock.close()
                continue
            conns.append((sock, reader))
            _ask(sock, reader, {"op": "reset", "id": 2}, until)
        rid = 3
        while conns and not stop.is_set() and time.monotonic() < deadline:
            until = time.monotonic() + timeout
            for sock, _ in conns:  # one step each, pipelined across the sessions
                step = {"op": "step", "id": rid, "action": 0, "obs": False}
                sock.sendall(client_frame(OP_BINARY, msgpack.packb(step)))
            for sock, reader in conns:
                data = _message(sock, reader, until)
                reply = decode_server_frame(data, max_frame_size=len(data))
                if isinstance(reply, Result) and not reply.done:
                    steps += 1
                else:  # the episode ended (or the step was refused): start another
                    outcomes[f"{reply.OP} {getattr(reply, 'code', 'done')}"] += 1
                    _ask(sock, reader, {"op": "reset", "id": rid}, until)
            rid += 1
    except EOFError as exc:
        outcomes[str(exc) or "closed"] += 1
    except FrameError as exc:
        outcomes[f"bad frame ({exc.code})"] += 1
    except OSError as exc:
        outcomes[error_name(exc)] += 1
    finally:
        for sock, _ in conns:
            sock.close()
    return {"sessions": len(conns), "steps": steps, "outcomes": dict(outcomes)}


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
            failures[error_name(exc)] += 1
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
                drop(sock, error_name(exc), answers)
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
                drop(sock, error_name(exc), answers)
                continue
            drop(sock, http_status(data) if data else "closed", answers)
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
    "heavy_sessions": heavy_sessions,
    "slowloris": slowloris,
    "vector_opens": vector_opens,
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
