"""Attacks that open sessions: vector opens in a loop, heavy sessions stepping, the largest
sessions until refused.

Each speaks the session protocol over a raw connection (:class:`RawSession`),
one request at a time, and ends by itself: a deadline, a count, its stop
event, or (the largest sessions) the server's refusal.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import select
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np

from openenv_ws.providers._base import fetch_health
from openenv_ws.wire.framing import FrameError, FrameReader, close_payload, parse_close

from .rawwire import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    Target,
    client_frame,
    error_name,
    handshake,
    read_server_frame,
)

__all__ = ["RawSession", "health_figures", "heavy_sessions", "largest_sessions", "vector_opens"]

# What one request may go wrong with: the connection ended or broke, or a bad frame came.
_FAILURES = (EOFError, FrameError, OSError)


class RawSession:
    """One session on a raw WebSocket connection: a request, then its reply.

    Pings the server sends are answered while a reply is read and by
    :meth:`service`, so that a session held idle is not dropped by the
    server's heartbeat.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = FrameReader(masked=False)
        self.ids = itertools.count(1)

    def send(self, op: str, **fields: Any) -> None:
        frame = {"op": op, "id": next(self.ids), **fields}
        self.sock.sendall(client_frame(OP_BINARY, msgpack.packb(frame)))

    def recv(self, timeout: float) -> dict[str, Any]:
        """The next reply; a close frame reads as ``{"op": "close", "code": ..., "message": ...}``.

        Raises:
            EOFError, FrameError, OSError: the connection ended, broke or sent a bad frame.
        """
        deadline = time.monotonic() + timeout
        while True:
            got = read_server_frame(self.sock, self.reader, deadline)
            if got.opcode == OP_BINARY:
                reply: dict[str, Any] = msgpack.unpackb(
                    got.payload, raw=False, strict_map_key=False
                )
                return reply
            if got.opcode == OP_CLOSE:
                code, reason = parse_close(got.payload)
                return {"op": "close", "code": code, "message": reason}
            if got.opcode == OP_PING:
                self.sock.sendall(client_frame(OP_PONG, got.payload))

    def call(self, op: str, timeout: float, **fields: Any) -> dict[str, Any]:
        self.send(op, **fields)
        return self.recv(timeout)

    def service(self) -> None:
        """Answer the pings that came meanwhile (nothing else comes to an idle session)."""
        while select.select([self.sock], [], [], 0)[0]:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            self.reader.feed(chunk)
            while (frame := self.reader.next_frame()) is not None:
                if frame.opcode == OP_PING:
                    self.sock.sendall(client_frame(OP_PONG, frame.payload))

    def close(self) -> None:
        """End the session (``close``, then a close frame) without waiting for the answers."""
        with contextlib.suppress(OSError):
            self.send("close")
            self.sock.sendall(client_frame(OP_CLOSE, close_payload(1000)))
        self.sock.close()


def outcome(reply: Mapping[str, Any]) -> str:
    """``opened``, ``batch``, ``error capacity``, ``close 1013``, ..."""
    op = reply.get("op")
    if op == "error":
        return f"error {reply.get('code')}"
    if op == "close":
        return f"close {reply.get('code')}"
    return str(op)


def open_session(
    target: Target,
    source: str,
    config: Mapping[str, Any],
    timeout: float,
    num_envs: int | None = None,
) -> tuple[RawSession | None, dict[str, Any]]:
    """(the session, ``opened``), or (None, the refusal: an error, a close or a failed handshake)."""
    what, sock = handshake(target, source, timeout)
    if sock is None:
        return None, {"op": "handshake", "code": what, "message": what}
    session = RawSession(sock)
    try:
        fields: dict[str, Any] = {"version": 1, "config": dict(config)}
        if num_envs is not None:
            fields["num_envs"] = num_envs
        reply = session.call("open", timeout, **fields)
    except _FAILURES:
        session.close()
        raise
    if reply.get("op") != "opened":
        session.close()
        return None, reply
    return session, reply


def _ms(values: Sequence[float]) -> dict[str, float | None]:
    ms = np.array(values) * 1e3
    return {
        "p50": float(np.percentile(ms, 50)) if len(ms) else None,
        "max": float(ms.max()) if len(ms) else None,
    }


def _failure(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "connection closed"
    if isinstance(exc, FrameError):
        return f"bad frame ({exc.code})"
    name = error_name(exc)
    return f"connection {name}" if name in ("reset", "refused") else name


def vector_opens(
    target: Target,
    source: str,
    *,
    stop: Any,
    seconds: float,
    num_envs: int,
    config: Mapping[str, Any],
    count: int,
    timeout: float,
) -> dict[str, Any]:
    """Open a vector session of `num_envs` envs, reset it, close it; repeat.

    At most `count` opens, none started after `seconds`; one under way is
    finished (each request waits at most `timeout`).
    """
    outcomes: collections.Counter[str] = collections.Counter()
    opens: list[float] = []
    resets: list[float] = []
    deadline = time.monotonic() + seconds
    i = 0
    while i < count and not stop.is_set() and time.monotonic() < deadline:
        i += 1
        start = time.perf_counter()
        stage = "open"
        try:
            session, reply = open_session(target, source, config, timeout, num_envs)
            if session is None:
                outcomes[f"open: {outcome(reply)}"] += 1
                stop.wait(0.2)
                continue
            opens.append(time.perf_counter() - start)
            try:
                stage, start = "reset", time.perf_counter()
                reply = session.call("reset", timeout, seed=i)
                done = reply.get("op") == "batch"
                outcomes["opened, reset" if done else f"reset: {outcome(reply)}"] += 1
                if done:
                    resets.append(time.perf_counter() - start)
            finally:
                session.close()
        except _FAILURES as exc:
            outcomes[f"{stage}: {_failure(exc)}"] += 1
    return {
        "attempts": i,
        "outcomes": dict(outcomes),
        "open_ms": _ms(opens),
        "reset_ms": _ms(resets),
    }


def _open_first(
    target: Target,
    source: str,
    configs: Sequence[Mapping[str, Any]],
    timeout: float,
    num_envs: int | None = None,
) -> tuple[RawSession | None, int, dict[str, Any], list[str]]:
    """The first of `configs` the server accepts: (session, its index, the reply, refusals).

    A config refused with ``bad_config`` is skipped for the next one (a bound
    lower than the one assumed); any other refusal ends the search.
    """
    skipped: list[str] = []
    for index, config in enumerate(configs):
        session, reply = open_session(target, source, config, timeout, num_envs)
        if session is not None or reply.get("code") != "bad_config":
            return session, index, reply, skipped
        skipped.append(str(reply.get("message", ""))[:300])
    return None, len(configs), {"op": "error", "code": "bad_config"}, skipped


def heavy_sessions(
    target: Target,
    source: str,
    *,
    stop: Any,
    seconds: float,
    count: int,
    configs: Sequence[Mapping[str, Any]],
    timeout: float,
    n_actions: int = 6,
) -> dict[str, Any]:
    """Open `count` sessions of the first accepted of `configs`, reset each, then step them
    all back to back (``obs`` false) for `seconds`; an episode that ends is reset.

    The steps go out in rounds: one to every session, then every reply. The
    stepping's window (monotonic clock, shared with the harness) comes back
    as ``windows["stepping"]``. Opening gives up after 4 x `timeout`.
    """
    sessions: list[RawSession] = []
    outcomes: collections.Counter[str] = collections.Counter()
    times: dict[str, list[float]] = {"open": [], "reset": [], "round": []}
    result: dict[str, Any] = {"config": None, "skipped": [], "steps": 0}
    try:
        start = time.perf_counter()
        first, index, reply, result["skipped"] = _open_first(target, source, configs, timeout)
        outcomes[outcome(reply)] += 1
        if first is not None:
            result["config"] = dict(configs[index])
            times["open"].append(time.perf_counter() - start)
            sessions.append(first)
            more = (target, source, result["config"], count, timeout, stop)
            _open_more(*more, sessions, times, outcomes)
            for session in sessions:
                start = time.perf_counter()
                outcomes[f"reset: {outcome(session.call('reset', timeout, seed=0))}"] += 1
                times["reset"].append(time.perf_counter() - start)
            t0 = time.monotonic()
            result["steps"] = _step_all(
                sessions, seconds, timeout, stop, n_actions, outcomes, times
            )
            result["windows"] = {"stepping": [t0, time.monotonic()]}
    except _FAILURES as exc:
        outcomes[_failure(exc)] += 1
    finally:
        for session in sessions:
            session.close()
    return {
        **result,
        "sessions": len(times["open"]),
        "outcomes": dict(outcomes),
        **{f"{name}_ms": _ms(values) for name, values in times.items()},
    }


def _open_more(
    target: Target,
    source: str,
    config: Mapping[str, Any],
    count: int,
    timeout: float,
    stop: Any,
    sessions: list[RawSession],
    times: dict[str, list[float]],
    outcomes: collections.Counter[str],
) -> None:
    """Open sessions of `config` until `count` are in `sessions`; give up at a ``capacity``
    refusal, after 3 other refusals in a row or after 4 x `timeout`."""
    begun = time.monotonic()
    refused = 0
    while len(sessions) < count and not stop.is_set() and time.monotonic() - begun < 4 * timeout:
        start = time.perf_counter()
        session, reply = open_session(target, source, config, timeout)
        outcomes[outcome(reply)] += 1
        if session is None:
            refused += 1
            if reply.get("code") == "capacity" or refused >= 3:
                return
            stop.wait(0.2)
            continue
        refused = 0
        times["open"].append(time.perf_counter() - start)
        sessions.append(session)


def _step_all(
    sessions: list[RawSession],
    seconds: float,
    timeout: float,
    stop: Any,
    n_actions: int,
    outcomes: collections.Counter[str],
    times: dict[str, list[float]],
) -> int:
    """Step every session in rounds for `seconds`; the steps answered with a result."""
    rng = np.random.default_rng(1)
    steps = 0
    deadline = time.monotonic() + seconds
    while sessions and not stop.is_set() and time.monotonic() < deadline:
        start = time.perf_counter()
        actions = rng.integers(0, n_actions, len(sessions)).tolist()
        for session, action in zip(sessions, actions, strict=True):
            session.send("step", action=action, obs=False)
        for session in list(sessions):
            reply = session.recv(timeout)
            if reply.get("op") != "result":
                outcomes[f"step: {outcome(reply)}"] += 1
                sessions.remove(session)
                session.close()
                continue
            steps += 1
            if reply.get("done"):
                before = time.perf_counter()
                outcomes[f"reset: {outcome(session.call('reset', timeout))}"] += 1
                times["reset"].append(time.perf_counter() - before)
        times["round"].append(time.perf_counter() - start)
    return steps


def health_figures(body: Mapping[str, Any] | None) -> dict[str, float]:
    """The numbers of ``/health`` about the budgets (SPEC section 9): ``memory.used``,
    ``memory.budget``, ``engine_threads.*``, ``stuck_calls``, ``pool.bytes``..."""
    found: dict[str, float] = {}

    def named(path: str) -> bool:
        return path.startswith(("memory.", "engine_threads.", "stuck_calls")) or "bytes" in path

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, int | float) and not isinstance(value, bool) and named(path):
            found[path] = float(value)

    walk(body or {}, "")
    return found


def _keep_alive(held: list[RawSession], lock: threading.Lock, done: threading.Event) -> None:
    """Answer the pings of the `held` sessions every second until `done`."""
    while not done.wait(1.0):
        with lock:
            for one in held:
                with contextlib.suppress(*_FAILURES):
                    one.service()


def largest_sessions(
    target: Target,
    source: str,
    *,
    stop: Any,
    seconds: float,
    configs: Sequence[Mapping[str, Any]],
    num_envs: int | None,
    limit: int,
    timeout: float,
) -> dict[str, Any]:
    """Open sessions of the first accepted of `configs` (vector sessions of `num_envs` envs
    when given), resetting and holding each, until the server refuses one, `limit` are
    open, the stop event or `seconds`; then close them all.

    When refused, ``/health`` is read before anything is closed (its budget
    and byte figures come back as ``health_at_refusal``).
    """
    held: list[RawSession] = []
    outcomes: collections.Counter[str] = collections.Counter()
    opens: list[float] = []
    resets: list[float] = []
    result: dict[str, Any] = {
        "config": None,
        "num_envs": num_envs,
        "skipped": [],
        "refusal": None,
        "ended": "deadline",
    }
    deadline = time.monotonic() + seconds
    index = 0
    # The sessions held answer the server's pings while the next one opens (an open of
    # 64 envs takes longer than a heartbeat's interval and timeout).
    lock, done = threading.Lock(), threading.Event()
    keeper = threading.Thread(target=_keep_alive, args=(held, lock, done), daemon=True)
    keeper.start()
    try:
        while True:
            if stop.is_set():
                result["ended"] = "stopped"
                break
            if time.monotonic() >= deadline:
                break
            if len(held) >= limit:
                result["ended"] = f"count ({limit})"
                break
            with lock:
                for one in held:
                    one.service()
            start = time.perf_counter()
            session: RawSession | None
            if result["config"] is None:
                session, index, reply, result["skipped"] = _open_first(
                    target, source, configs, timeout, num_envs
                )
                if session is not None:
                    result["config"] = dict(configs[index])
            else:
                session, reply = open_session(target, source, result["config"], timeout, num_envs)
            outcomes[outcome(reply)] += 1
            if session is None:
                result["ended"] = "refused"
                result["refusal"] = f"{outcome(reply)}: {reply.get('message')}"[:400]
                result["health_at_refusal"] = health_figures(fetch_health(*target, timeout=5.0))
                break
            opens.append(time.perf_counter() - start)
            start = time.perf_counter()
            reply = session.call("reset", timeout, seed=0)
            if reply.get("op") not in ("result", "batch"):
                session.close()
                result["ended"] = "refused"
                result["refusal"] = f"reset: {outcome(reply)}: {reply.get('message')}"[:400]
                break
            resets.append(time.perf_counter() - start)
            with lock:
                held.append(session)
    except _FAILURES as exc:
        outcomes[_failure(exc)] += 1
        result["ended"] = f"failed ({_failure(exc)})"
    finally:
        done.set()
        keeper.join()
        for one in held:
            one.close()
    return {
        **result,
        "admitted": len(held),
        "outcomes": dict(outcomes),
        "open_ms": _ms(opens),
        "reset_ms": _ms(resets),
    }
