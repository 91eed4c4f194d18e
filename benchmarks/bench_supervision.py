"""Per-step cost of the server's supervision: resume cache, step timing, idle/drain hooks.

Drives the server's message loop in-process (no sockets, so nothing but the
loop's own work is timed) with a stream of ``step`` frames for a
FakeEnvironment session, two ways in the same run:

- ``plain``: the loop the server had before supervision: receive, handle on
  a bare :class:`ServerSession`, send;
- ``supervised``: :meth:`Supervisor.serve` with a :class:`SupervisedSession`
  (reply cache for resume, step latency histogram, error counts, idle and
  drain bookkeeping).

It also times one histogram observation, ours against ``prometheus_client``'s.
Prints the median per-step CPU time of each over the rounds (alternating)
and the difference.

    python benchmarks/bench_supervision.py [--steps 20000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, Histogram

from openenv_ws.protocol import ClientFrame, Open, Reset, Step, encode
from openenv_ws.server import ServerLimits, ServerSession, SessionRegistry
from openenv_ws.server.metrics import STEP_BUCKETS, LatencyHistogram
from openenv_ws.server.reliability import Link, SupervisedSession, Supervisor
from openenv_ws.testing import fake_factory

Message = MutableMapping[str, Any]
CONFIG = {"episode_length": 10**9, "obs_shape": [4, 4]}


def messages(steps: int) -> list[Message]:
    frames: list[ClientFrame] = [Open(id=1, config=CONFIG), Reset(id=2, seed=0)]
    frames += [Step(id=3 + i, action=i % 4) for i in range(steps)]
    out: list[Message] = [{"type": "websocket.receive", "bytes": encode(f)} for f in frames]
    out.append({"type": "websocket.disconnect", "code": 1000})
    return out


def io(stream: list[Message]) -> tuple[Callable[[], Any], Callable[[Message], Any]]:
    feed = iter(stream)

    async def receive() -> Message:
        return next(feed)

    async def send(message: Message) -> None:
        return None

    return receive, send


async def plain(stream: list[Message]) -> None:
    receive, send = io(stream)
    session = ServerSession(fake_factory, max_frame_size=1 << 20)
    handle = session.handle
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            break
        reply, close = handle(message["bytes"])
        await send({"type": "websocket.send", "bytes": reply})
        if close is not None:
            break
    session.close()


async def supervised(stream: list[Message]) -> None:
    receive, send = io(stream)
    supervisor = Supervisor(fake_factory, SessionRegistry(ServerLimits()))
    link = Link(asyncio.current_task(), authenticated=True, now=0.0)
    link.session = SupervisedSession(supervisor, link)
    supervisor.links.add(link)
    dropped = await supervisor.serve(link, receive, send)
    supervisor.disconnect(link, dropped=dropped)
    await supervisor.close()


# CPU time of this process, not wall time: on a shared machine, time spent
# waiting for a core is not the loop's cost.
def per_step_ns(run: Callable[[list[Message]], Any], steps: int) -> float:
    stream = messages(steps)
    start = time.process_time()
    asyncio.run(run(stream))
    return (time.process_time() - start) / steps * 1e9


def observe_ns(observe: Callable[[float], None], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        observe(0.0003)
    return (time.process_time() - start) / n * 1e9


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (alternating)")
    args = parser.parse_args(argv)

    samples: dict[str, list[float]] = {"plain": [], "supervised": []}
    for _ in range(args.rounds):
        samples["plain"].append(per_step_ns(plain, args.steps))
        samples["supervised"].append(per_step_ns(supervised, args.steps))
    ref = statistics.median(samples["plain"])
    ours = statistics.median(samples["supervised"])

    registry = CollectorRegistry()
    prom = Histogram("x_seconds", "x", registry=registry, buckets=STEP_BUCKETS)
    hist = LatencyHistogram()
    n = args.steps * 5
    prom_ns = statistics.median(observe_ns(prom.observe, n) for _ in range(args.rounds))
    hist_ns = statistics.median(observe_ns(hist.observe, n) for _ in range(args.rounds))

    print(
        f"server message loop, FakeEnvironment step (4x4 obs), {args.steps} steps x {args.rounds} rounds"
    )
    print(f"  plain loop + ServerSession        {ref:8.0f} ns/step")
    print(f"  Supervisor.serve + Supervised     {ours:8.0f} ns/step")
    print(f"  supervision cost                  {ours - ref:+8.0f} ns/step ({ours / ref:.3f}x)")
    print("one step-latency observation")
    print(f"  prometheus_client Histogram       {prom_ns:8.0f} ns")
    print(f"  LatencyHistogram (ours)           {hist_ns:8.0f} ns ({hist_ns / prom_ns:.2f}x)")


if __name__ == "__main__":
    main()
