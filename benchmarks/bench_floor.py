"""The floor under every step: a bare request/reply between two processes, and ours.

Two contenders per placement, alternating by round:

- ``bare TCP``: a 30-byte message and a 60-byte answer over loopback TCP
  between two processes (``socket.send`` / ``recv_into``, nothing else): what
  the kernel and the scheduler cost one round trip;
- ``openenv-ws, zero-cost env``: a sync ``EnvClient.step`` against
  ``openenv-ws serve --env fake`` (an environment that does nothing and
  answers 1-byte observations): the runtime's own round trip without an
  emulator.

Placements: ``shared`` (both processes on core 0), ``split`` (core 0 and core
1, both sleeping between messages) and ``split, polling`` (the same, both
busy-polling instead: the bare peers spin on non-blocking reads, our server
runs with ``--busy-poll`` and the client with ``busy_poll``). Each row gives
the median over rounds of the p50 and the mean per round trip, and the ratio
of ours to the bare round trip in the same placement.

    python benchmarks/bench_floor.py [--steps 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

POLL = 0.002
PLACEMENTS = {"shared": (0, 0, False), "split": (0, 1, False), "split, polling": (0, 1, True)}


def _recv(sock: socket.socket, buf: bytearray, poll: bool) -> int:
    if not poll:
        return sock.recv_into(buf)
    while True:
        try:
            return sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass


def _echo(listener: socket.socket, core: int, poll: bool) -> None:
    """The bare peer: answer every message with 60 bytes until the client hangs up."""
    os.sched_setaffinity(0, {core})
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, answer = bytearray(4096), b"r" * 60
    while _recv(conn, buf, poll):
        conn.sendall(answer)


def _timed(step: Callable[[], object], steps: int) -> tuple[float, float]:
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2] * 1e6, sum(times) / len(times) * 1e6


def bare(server_core: int, client_core: int, poll: bool, steps: int) -> tuple[float, float]:
    listener = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:
        try:
            _echo(listener, server_core, poll)
        finally:
            os._exit(0)
    os.sched_setaffinity(0, {client_core})
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, message = bytearray(4096), b"q" * 30

    def step() -> None:
        sock.sendall(message)
        _recv(sock, buf, poll)

    try:
        _timed(step, steps // 10)
        return _timed(step, steps)
    finally:
        sock.close()
        listener.close()
        os.waitpid(pid, 0)


def ours(server_core: int, client_core: int, poll: bool, steps: int) -> tuple[float, float]:
    args = ["--env", "fake", *(["--busy-poll", str(POLL)] if poll else [])]
    with LocalServerProvider(args=args) as server:
        assert server.process is not None
        os.sched_setaffinity(server.process.pid, {server_core})
        os.sched_setaffinity(0, {client_core})
        config = {"episode_length": 10**9}
        env: EnvClient[Any]
        with EnvClient(server.url, config=config, busy_poll=POLL if poll else 0.0) as env:
            env.reset(seed=0)
            _timed(lambda: env.step(0), steps // 10)
            return _timed(lambda: env.step(0), steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench_floor needs two cores (cores 0 and 1)")
    print(f"steps={args.steps} rounds={args.rounds}; round trip in µs, median over rounds")
    print(f"{'placement':16} {'contender':28} {'p50':>7} {'mean':>7} {'vs bare':>8}")
    for name, (server_core, client_core, poll) in PLACEMENTS.items():
        results: dict[str, list[tuple[float, float]]] = {"bare TCP": [], "openenv-ws": []}
        for _ in range(args.rounds):
            results["bare TCP"].append(bare(server_core, client_core, poll, args.steps))
            results["openenv-ws"].append(ours(server_core, client_core, poll, args.steps))
        p50s = {k: statistics.median(p for p, _ in v) for k, v in results.items()}
        means = {k: statistics.median(m for _, m in v) for k, v in results.items()}
        for label, key in (("bare TCP", "bare TCP"), ("openenv-ws, zero-cost env", "openenv-ws")):
            ratio = means[key] / means["bare TCP"]
            print(f"{name:16} {label:28} {p50s[key]:7.1f} {means[key]:7.1f} {ratio:7.2f}x")
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))


if __name__ == "__main__":
    main()
