"""The floor under every step: a bare request/reply between two processes, and ours.

Two contenders per placement, alternating by round:

- ``bare TCP``: a 30-byte message and a 60-byte answer over loopback TCP
  between two processes (``socket.send`` / ``recv_into``, nothing else): what
  the kernel and the scheduler cost one round trip;
- ``openenv-ws, zero-cost env``: a sync ``EnvClient.step`` against
  ``openenv-ws serve --env fake`` (an environment that does nothing and
  answers 1-byte observations): the runtime's own round trip without an
  emulator.

Placements: ``shared`` (both processes on one core), ``split`` (two cores,
both sleeping between messages) and ``split, polling`` (the same, both
busy-polling instead: the bare peers spin on non-blocking reads, our server
runs with ``--busy-poll`` and the client with ``busy_poll``). Each row gives
the median over rounds of the p50 and the mean per round trip, and the ratio
of ours to the bare round trip in the same placement.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

from openenv_ws.client import EnvClient

from ..measure import Placement
from ..servers import our_server
from ..suite import Column, Context, Section, scenario, two_cores

__all__: list[str] = []

POLL = 0.002
COLUMNS = [
    Column("placement", "placement"),
    Column("path", "contender"),
    Column("p50_us", "p50 µs", ".1f"),
    Column("mean_us", "mean µs", ".1f"),
    Column("vs_bare", "vs bare TCP", ".2f"),
]


def _recv(sock: socket.socket, buf: bytearray, poll: bool) -> int:
    if not poll:
        return sock.recv_into(buf)
    while True:
        try:
            return sock.recv_into(buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass


def _echo(listener: socket.socket, cores: frozenset[int] | None, poll: bool) -> None:
    """The bare peer: answer every message with 60 bytes until the client hangs up."""
    if cores is not None:
        os.sched_setaffinity(0, cores)
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


def bare(placement: Placement, poll: bool, steps: int) -> tuple[float, float]:
    """(p50, mean) µs of a bare TCP round trip to a forked echo peer."""
    listener = socket.create_server(("127.0.0.1", 0))
    pid = os.fork()
    if pid == 0:
        try:
            _echo(listener, placement.server, poll)
        finally:
            os._exit(0)
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf, message = bytearray(4096), b"q" * 30

    def step() -> None:
        sock.sendall(message)
        _recv(sock, buf, poll)

    try:
        with placement.client_side():
            _timed(step, max(1, steps // 10))
            return _timed(step, steps)
    finally:
        sock.close()
        listener.close()
        os.waitpid(pid, 0)


def ours(placement: Placement, poll: bool, steps: int) -> tuple[float, float]:
    """(p50, mean) µs of a sync step against a server of the zero-cost environment."""
    args = ["--no-web", "--env", "fake", *(["--busy-poll", str(POLL)] if poll else [])]
    with our_server(placement, args) as server:
        env: EnvClient[Any]
        config = {"episode_length": 10**9}
        with (
            EnvClient(server.url, config=config, busy_poll=POLL if poll else 0.0) as env,
            placement.client_side(),
        ):
            env.reset(seed=0)
            _timed(lambda: env.step(0), max(1, steps // 10))
            return _timed(lambda: env.step(0), steps)


@scenario("floor", "The floor: bare TCP round trip vs ours", requires=two_cores, default=False)
def run(ctx: Context) -> Section:
    """A bare TCP request/reply between two processes vs a step of a zero-cost environment."""
    opts = ctx.options
    rounds = max(1, opts.rounds)
    section = Section("floor", "The floor: bare TCP round trip vs ours", COLUMNS)
    placements = [
        ("shared", Placement.named("shared"), False),
        ("split", Placement.named("split"), False),
        ("split, polling", Placement.named("split"), True),
    ]
    ctx.progress.start(section.title, len(placements) * rounds)
    for name, placement, poll in placements:
        results: dict[str, list[tuple[float, float]]] = {"bare TCP": [], "openenv-ws": []}
        for r in range(rounds):
            ctx.progress.phase(f"{name} round {r + 1}")
            results["bare TCP"].append(bare(placement, poll, opts.steps))
            results["openenv-ws"].append(ours(placement, poll, opts.steps))
        p50s = {k: statistics.median(p for p, _ in v) for k, v in results.items()}
        means = {k: statistics.median(m for _, m in v) for k, v in results.items()}
        for label, key in (("bare TCP", "bare TCP"), ("openenv-ws, zero-cost env", "openenv-ws")):
            section.add(
                placement=name,
                path=label,
                p50_us=p50s[key],
                mean_us=means[key],
                vs_bare=means[key] / means["bare TCP"],
            )
    split = Placement.named("split").describe()
    section.notes.append(
        f"{opts.steps} round trips per contender and round, median of {rounds} rounds; "
        f"{split}; busy polling: the bare peers spin on non-blocking reads, our server "
        f"runs with --busy-poll {POLL} and the client with busy_poll={POLL}."
    )
    return section
