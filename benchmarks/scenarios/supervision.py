"""Per-step cost of the server's supervision: resume cache, step timing, idle/drain hooks.

Drives the server's message loop in-process (no sockets, so nothing but the
loop's own work is timed) with a stream of ``step`` frames for a
FakeEnvironment session, two ways in the same run:

- ``plain``: the loop the server had before supervision: receive, handle on
  a bare :class:`ServerSession`, send;
- ``supervised``: the server's connection loop (:mod:`openenv_ws.server.session.connection`)
  with a :class:`Supervisor` and its :class:`SupervisedSession`
  (reply cache for resume, step latency histogram, error counts, idle and
  drain bookkeeping).

It also times one histogram observation, ours against ``prometheus_client``'s.
Each row is the median per-step CPU time over the rounds (alternating), with
its ratio to the plain loop. The loop's internals are imported when the
scenario runs: a server without them leaves it pending, not the suite broken.

"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from ..suite import Column, Context, Section, has_attr, scenario

__all__: list[str] = []

COLUMNS = [
    Column("path", "what"),
    Column("ns", "CPU ns", ",.0f"),
    Column("vs_reference", "vs reference", ".3f"),
    Column("extra_ns", "extra ns", "+,.0f"),
]

Message = MutableMapping[str, Any]
CONFIG = {"episode_length": 10**9, "obs_shape": [4, 4]}


def messages(steps: int) -> list[Message]:
    from openenv_ws.protocol import ClientFrame, Open, Reset, Step, encode

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
    from openenv_ws.server import ServerSession
    from openenv_ws.testing import fake_factory

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
    from openenv_ws.server import ServerLimits, SessionRegistry
    from openenv_ws.server.session.connection import run as serve_connection
    from openenv_ws.server.session.supervisor import Supervisor
    from openenv_ws.testing import fake_factory

    receive, send = io(stream)
    supervisor = Supervisor(fake_factory, SessionRegistry(ServerLimits()))
    await serve_connection(supervisor, {"type": "websocket"}, receive, send)
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


@scenario(
    "supervision",
    "Supervision: the server loop's per-step cost",
    requires=has_attr(
        "openenv_ws.server.session.connection", "run", "the server's connection loop"
    ),
    default=False,
)
def run(ctx: Context) -> Section:
    """The server's supervised message loop vs a bare ServerSession loop, no sockets."""
    from prometheus_client import CollectorRegistry, Histogram

    from openenv_ws.server.runtime.metrics import STEP_BUCKETS, LatencyHistogram

    opts = ctx.options
    steps, rounds = opts.steps, max(1, opts.rounds)
    section = Section("supervision", "Supervision: the server loop's per-step cost", COLUMNS)
    ctx.progress.start(section.title, rounds + 1)
    samples: dict[str, list[float]] = {"plain": [], "supervised": []}
    for r in range(rounds):
        ctx.progress.phase(f"round {r + 1}")
        samples["plain"].append(per_step_ns(plain, steps))
        samples["supervised"].append(per_step_ns(supervised, steps))
    ref = statistics.median(samples["plain"])
    ours = statistics.median(samples["supervised"])
    ctx.progress.phase("histograms")
    registry = CollectorRegistry()
    prom = Histogram("x_seconds", "x", registry=registry, buckets=STEP_BUCKETS)
    hist = LatencyHistogram()
    n = steps * 5
    prom_ns = statistics.median(observe_ns(prom.observe, n) for _ in range(rounds))
    hist_ns = statistics.median(observe_ns(hist.observe, n) for _ in range(rounds))
    section.add(path="step: plain loop + ServerSession (reference)", ns=ref, vs_reference=1.0)
    section.add(
        path="step: the server's connection loop (Supervisor, SupervisedSession)",
        ns=ours,
        vs_reference=ours / ref,
        extra_ns=ours - ref,
    )
    section.add(
        path="observation: prometheus_client Histogram (reference)", ns=prom_ns, vs_reference=1.0
    )
    section.add(
        path="observation: LatencyHistogram (ours)",
        ns=hist_ns,
        vs_reference=hist_ns / prom_ns,
        extra_ns=hist_ns - prom_ns,
    )
    section.notes.append(
        f"FakeEnvironment steps (4x4 observations), {steps} steps x {rounds} rounds, "
        "median CPU time of this process per step."
    )
    return section
