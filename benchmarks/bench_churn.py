"""One session per episode: what the sessions coming and going cost a session that steps.

A rollout worker that opens a session per episode makes the server produce an
environment per episode. A Pong ROM load holds the GIL for ~0.1 s, so every
load (inline on ``open`` without a pool, in the pool's background refill with
one) stops every other session of that server process for as long. A pool that
takes back the environments of ended sessions (the default) loads nothing once
it is full.

Each server runs pinned to core 0; a *steady* session (RGB, the sync client)
steps on core 1 and each step's latency is recorded, while a *churn* process
(also on core 1) opens a session, plays an episode of ``--episode`` steps and
closes it, over and over, for as long as the steady session runs. Servers:

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
server with no churn, and in-process ``AtariEnvironment.step`` on core 1.
ROM loads are the server's own count: misses plus background builds of the
pool, or every session opened without one.

    python benchmarks/bench_churn.py --steps 6000 --episode 100
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
import urllib.request
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import numpy as np

from atari import AtariEnvironment
from benchmarks.measure import n_actions, pin_process, time_steps
from benchmarks.servers import pool_args, wait_pool_full
from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

SERVER_CORE, CLIENT_CORE = 0, 1
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
    os.sched_setaffinity(0, {CLIENT_CORE})
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


def run_server(
    name: str, args: argparse.Namespace, config: dict[str, Any], *, with_churn: bool
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    size, extra = SERVERS[name]
    flags = ["--no-web", *pool_args(size, {"game": args.game}), *extra]
    with LocalServerProvider(args=flags) as server:
        env: EnvClient[Any] = EnvClient(server.url, config=config)
        with env:
            assert server.pid is not None
            pin_process(server.pid, {SERVER_CORE})
            if size:
                wait_pool_full(server)  # refilled after the steady session took its environment
            before, gc_before = server.health() or {}, full_collections(server)
            stop, count = ctx.Event(), ctx.Value("i", 0)
            worker = ctx.Process(target=churn, args=(server.url, config, args.episode, stop, count))
            if with_churn:
                worker.start()
                while count.value < 1 and worker.is_alive():  # the churn has started
                    time.sleep(0.01)
            start = time.perf_counter()
            ms = steady(env, args.steps, args.seed)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000, help="steps of the steady session")
    parser.add_argument("--episode", type=int, default=100, help="steps per churned session")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = {"game": args.game, "obs_type": "rgb"}
    os.sched_setaffinity(0, {CLIENT_CORE})

    rows: dict[str, dict[str, Any]] = {}
    rows["in-process step (reference)"] = {
        "ms": inprocess(config, args.steps, args.seed),
        "sessions": 0,
        "seconds": 0.0,
        "loads": 0,
        "gcs": 0,
        "gc_seconds": 0.0,
    }
    rows["pool, recycling, no churn (reference)"] = run_server(
        "pool, recycling", args, config, with_churn=False
    )
    for name in SERVERS:
        rows[f"{name}, churn"] = run_server(name, args, config, with_churn=True)

    quiet = rows["pool, recycling, no churn (reference)"]["ms"]
    print(
        f"game={args.game} obs=rgb steady steps={args.steps} churned episodes of "
        f"{args.episode} steps; server on core {SERVER_CORE}, clients on core {CLIENT_CORE}"
    )
    header = (
        f"{'steady session':<40} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
        f"{'>' + format(STALL_MS, 'g') + ' ms':>7} {'p99/quiet':>9} {'sessions/s':>10} "
        f"{'ROM loads':>9} {'per 100':>7} {'full GCs':>8} {'GC ms':>6}"
    )
    print(header)
    for label, row in rows.items():
        ms = row["ms"]
        rate = row["sessions"] / row["seconds"] if row["seconds"] else 0.0
        per100 = 100 * row["loads"] / row["sessions"] if row["sessions"] else 0.0
        gc_ms = 1e3 * row["gc_seconds"] / row["gcs"] if row["gcs"] else 0.0
        print(
            f"{label:<40} {np.percentile(ms, 50):7.2f} {np.percentile(ms, 99):7.2f} "
            f"{ms.max():7.1f} {int((ms > STALL_MS).sum()):7d} "
            f"{np.percentile(ms, 99) / np.percentile(quiet, 99):9.2f} {rate:10.1f} "
            f"{row['loads']:9d} {per100:7.0f} {row['gcs']:8.0f} {gc_ms:6.1f}"
        )


if __name__ == "__main__":
    main()
