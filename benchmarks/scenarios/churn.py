"""One session per episode: what the sessions coming and going cost a session that steps.

A rollout worker that opens a session per episode makes the server produce an
environment per episode. A Pong ROM load holds the GIL for ~0.1 s, so every
load (inline on ``open`` without a pool, in the pool's background refill with
one) stops every other session of that server process for as long. A pool that
takes back the environments of ended sessions (the default) loads nothing once
it is full.

Each server runs pinned to the split placement's server core; a *steady*
session (RGB, the sync client) steps ``--steps`` times on the client core and
each step's latency is recorded, while a *churn* process (also on the client
core) opens a session, plays an episode and closes it, over and over, for as
long as the steady session runs (an episode is ``--steps``/20 steps, between 5
and 100). Servers:

- ``no pool``: ``--pool-size 0``, a ROM load inside every ``open``;
- ``pool, no recycling``: ``--no-pool-recycle``, never-used environments only
  (the background refill loads a ROM per session);
- ``pool, recycling``: the default;
- ``pool, recycling, no gc freeze``: the default but ``--no-gc-freeze``, so
  Python's full collections scan every module's objects again.

The server's full garbage collections in the window (``/metrics``,
``openenv_ws_process_gc_pause_seconds{generation="2"}``) are counted too,
with their mean pause: every session of the process waits for them.

Reference rows, measured in the same run: the steady session on the default
server with no churn, and in-process ``AtariEnvironment.step`` on the client core.
ROM loads are the server's own count: misses plus background builds of the
pool, or every session opened without one.

"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import urllib.request
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import numpy as np

from atari import AtariEnvironment
from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

from ..measure import Placement, n_actions, time_steps
from ..servers import our_server, pool_args, wait_pool_full
from ..suite import Column, Context, Section, scenario, two_cores

__all__ = ["SERVERS"]

STALL_MS = 20.0
#: name -> (warm pool size, other ``serve`` options)
SERVERS: dict[str, tuple[int, list[str]]] = {
    "no pool": (0, []),
    "pool, no recycling": (2, ["--no-pool-recycle"]),
    "pool, recycling": (2, []),
    "pool, recycling, no gc freeze": (2, ["--no-gc-freeze"]),
}


def churn(
    url: str,
    config: dict[str, Any],
    episode: int,
    stop: Event,
    count: Synchronized,  # type: ignore[type-arg]
) -> None:
    """Open, play `episode` steps, close; until `stop` is set. Runs in its own process."""
    with contextlib.suppress(ValueError):
        client = Placement.named("split").client
        if client is not None:
            os.sched_setaffinity(0, client)
    rng = np.random.default_rng(1)
    while not stop.is_set():
        env: EnvClient[Any] = EnvClient(url, config=config)
        with env:
            env.reset()
            n = n_actions(env.spec.action)
            for action in rng.integers(0, n, episode).tolist():
                if env.step(action).done:
                    break
        with count.get_lock():
            count.value += 1


def _actions(n: int, steps: int, seed: int) -> tuple[int, ...]:
    return tuple(np.random.default_rng(seed).integers(0, n, steps).tolist())


def steady(env: EnvClient[Any], steps: int, seed: int) -> np.ndarray[Any, Any]:
    """Milliseconds of each of `steps` steps of an open session (reset on episode end)."""
    env.reset(seed=seed)
    actions = _actions(n_actions(env.spec.action), steps, seed)
    return time_steps(lambda a: env.step(a).done, env.reset, actions) * 1e3


def inprocess(config: dict[str, Any], steps: int, seed: int) -> np.ndarray[Any, Any]:
    env = AtariEnvironment(config)
    env.reset(seed=seed)
    actions = _actions(n_actions(env.spec.action), steps, seed)
    ms = time_steps(lambda a: env.step(a).done, env.reset, actions) * 1e3
    env.close()
    return ms


def full_collections(server: LocalServerProvider) -> tuple[float, float]:
    """(count, seconds) of the server's full garbage collections so far."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {"count": 0.0, "sum": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name != "openenv_ws_process_gc_pause_seconds":
            continue
        for sample in family.samples:
            kind = sample.name.rpartition("_")[2]
            if sample.labels.get("generation") == "2" and kind in found:
                found[kind] = sample.value
    return found["count"], found["sum"]


def rom_loads(health: dict[str, Any]) -> int:
    pool = health.get("pool")
    if pool is None:
        return int(health["opened_total"])
    return int(pool["misses"]) + int(pool["built"])


COLUMNS = [
    Column("path", "steady session"),
    Column("p50_ms", "p50 ms", ".2f"),
    Column("p99_ms", "p99 ms", ".2f"),
    Column("max_ms", "max ms", ".1f"),
    Column("stalls", f"steps > {STALL_MS:g} ms"),
    Column("p99_vs_quiet", "p99 / quiet", ".2f"),
    Column("sessions_per_s", "sessions/s", ".1f"),
    Column("rom_loads", "ROM loads"),
    Column("loads_per_100", "loads per 100 sessions", ".0f"),
    Column("full_gcs", "full GCs"),
    Column("gc_ms", "mean full GC ms", ".1f"),
]


def run_server(
    placement: Placement,
    name: str,
    config: dict[str, Any],
    steps: int,
    episode: int,
    seed: int,
    *,
    with_churn: bool,
) -> dict[str, Any]:
    """The steady session's step times on server `name`, with or without churn next to it."""
    ctx = multiprocessing.get_context("spawn")
    size, extra = SERVERS[name]
    flags = ["--no-web", *pool_args(size, {"game": config["game"]}), *extra]
    with our_server(placement, flags) as server:
        env: EnvClient[Any] = EnvClient(server.url, config=config)
        with env:
            if size:
                wait_pool_full(server)  # refilled after the steady session took its environment
            before, gc_before = server.health() or {}, full_collections(server)
            stop, count = ctx.Event(), ctx.Value("i", 0)
            worker = ctx.Process(target=churn, args=(server.url, config, episode, stop, count))
            if with_churn:
                worker.start()
                while count.value < 1 and worker.is_alive():  # the churn has started
                    time.sleep(0.01)
            start = time.perf_counter()
            with placement.client_side():
                ms = steady(env, steps, seed)
            elapsed = time.perf_counter() - start
            if with_churn:
                stop.set()
                worker.join(60)
            after, gc_after = server.health() or {}, full_collections(server)
    sessions = count.value if with_churn else 0
    return {
        "ms": ms,
        "sessions": sessions,
        "seconds": elapsed,
        "loads": rom_loads(after) - rom_loads(before),
        "gcs": gc_after[0] - gc_before[0],
        "gc_seconds": gc_after[1] - gc_before[1],
    }


@scenario(
    "churn",
    "Churn: sessions coming and going next to one that steps",
    requires=two_cores,
    default=False,
)
def run(ctx: Context) -> Section:
    """One session per episode next to a steady session: its stalls, ROM loads, full GCs."""
    opts = ctx.options
    section = Section("churn", "Churn: sessions coming and going next to one that steps", COLUMNS)
    placement = Placement.named("split")
    config = {"game": opts.games[0], "obs_type": "rgb"}
    steps, episode = opts.steps, min(100, max(5, opts.steps // 20))
    ctx.progress.start(section.title, 2 + len(SERVERS))
    rows: dict[str, dict[str, Any]] = {}
    ctx.progress.phase("in-process")
    with placement.client_side():
        rows["in-process step (reference)"] = {
            "ms": inprocess(config, steps, opts.seed),
            "sessions": 0,
            "seconds": 0.0,
            "loads": 0,
            "gcs": 0,
            "gc_seconds": 0.0,
        }
    ctx.progress.phase("pool, recycling, no churn")
    rows["pool, recycling, no churn (reference)"] = run_server(
        placement, "pool, recycling", config, steps, episode, opts.seed, with_churn=False
    )
    for name in SERVERS:
        ctx.progress.phase(f"{name}, churn")
        rows[f"{name}, churn"] = run_server(
            placement, name, config, steps, episode, opts.seed, with_churn=True
        )
    quiet = float(np.percentile(rows["pool, recycling, no churn (reference)"]["ms"], 99))
    for label, row in rows.items():
        ms = row["ms"]
        p50, p99 = np.percentile(ms, [50, 99])
        section.add(
            path=label,
            p50_ms=float(p50),
            p99_ms=float(p99),
            max_ms=float(ms.max()),
            stalls=int((ms > STALL_MS).sum()),
            p99_vs_quiet=float(p99) / quiet,
            sessions_per_s=row["sessions"] / row["seconds"] if row["seconds"] else 0.0,
            rom_loads=int(row["loads"]),
            loads_per_100=100 * row["loads"] / row["sessions"] if row["sessions"] else 0.0,
            full_gcs=int(row["gcs"]),
            gc_ms=1e3 * row["gc_seconds"] / row["gcs"] if row["gcs"] else 0.0,
        )
    section.notes.append(
        f"{config['game']} rgb, {steps} steady steps, churned episodes of {episode} steps; "
        f"{placement.describe()}, the churn process on the client's core."
    )
    return section
