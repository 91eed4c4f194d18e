"""Session costs: time to open a session (cold, warm) and server memory per session."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import numpy as np

from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

from ..measure import Workload, rss_bytes
from ..servers import our_server, pool_args, supports_pool, wait_pool_full
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

OPEN_COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("path", "path"),
    Column("count", "sessions"),
    Column("open_p50_ms", "open p50 ms", ".1f"),
    Column("p50_ms", "first obs p50 ms", ".1f"),
    Column("p90_ms", "first obs p90 ms", ".1f"),
    Column("max_ms", "first obs max ms", ".1f"),
    Column("vs_inprocess", "vs in-process", ".2f"),
    Column("note", "note"),
]

MEMORY_COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("path", "path"),
    Column("sessions", "sessions"),
    Column("before_mb", "RSS before MB", ".1f"),
    Column("after_mb", "RSS with sessions MB", ".1f"),
    Column("per_session_mb", "MB per session", ".2f"),
    Column("vs_inprocess", "vs in-process", ".2f"),
]


def _ms(opens: list[float], firsts: list[float]) -> dict[str, float]:
    ms = np.array(firsts) * 1e3
    p50, p90 = np.percentile(ms, [50, 90])
    return {
        "open_p50_ms": float(np.median(opens) * 1e3),
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "max_ms": float(ms.max()),
    }


@scenario("open", "Session open time")
def run_open(ctx: Context) -> Section:
    """Connect + open + first observation, cold (ROM load per session) and warm (pool)."""
    opts = ctx.options
    section = Section("open", "Session open time", OPEN_COLUMNS)
    placement = ctx.placements()[0]
    works = list(ctx.workloads())
    ctx.progress.start(section.title, 3 * len(works))
    pooled = supports_pool()
    for work in works:
        base = {"game": work.game, "obs": work.obs_type, "count": opts.open_count}
        ctx.progress.phase(f"in-process construct + reset {work.label()}")
        with placement.client_side():
            reference = _ms(*_inprocess_opens(work, opts.open_count))
        section.add(**base, path="in-process: load + reset", **reference, vs_inprocess=1.0)
        for kind, size in (("cold", 0), ("warm", opts.open_count)):
            path = f"openenv-ws {kind}: connect + open + reset"
            ctx.progress.phase(f"{kind} open {work.label()}")
            if not pooled and kind == "warm":
                section.add(**base, path=path, note="pending: this server has no warm pool")
                continue
            args = pool_args(size, work.config) if pooled else []
            with our_server(placement, args) as server, placement.client_side():
                stats = _ms(*_remote_opens(server, work, opts.open_count, warm=size > 0))
            stats["vs_inprocess"] = stats["p50_ms"] / reference["p50_ms"]
            note = f"--pool-size {size}" if pooled else "no pool in this build"
            section.add(**base, path=path, **stats, note=note)
    section.notes.append(
        "From nothing to the first observation: in-process = construct AtariEnvironment "
        "(ROM load) + reset(); openenv-ws = WebSocket connect + open (open p50) + reset() on a "
        "running server, one session after another, each closed before the next. Warm: the "
        "server's pool is full before each open. A seeded reset costs ~3-5 ms on either path "
        "(the post-load state is restored with its generator re-seeded instead of loading the "
        "ROM again). vs in-process: first-obs p50 over in-process first-obs p50."
    )
    return section


def _inprocess_opens(work: Workload, count: int) -> tuple[list[float], list[float]]:
    from atari import AtariEnvironment

    opens, firsts = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        env = AtariEnvironment(work.config)
        t1 = time.perf_counter()
        env.reset()
        t2 = time.perf_counter()
        opens.append(t1 - t0)
        firsts.append(t2 - t0)
        env.close()
    return opens, firsts


def _remote_opens(
    server: LocalServerProvider, work: Workload, count: int, *, warm: bool
) -> tuple[list[float], list[float]]:
    opens, firsts = [], []
    for _ in range(count):
        if warm:
            wait_pool_full(server)
        t0 = time.perf_counter()
        client: EnvClient[Any] = EnvClient(server.url, config=work.config)
        t1 = time.perf_counter()
        client.reset()
        t2 = time.perf_counter()
        opens.append(t1 - t0)
        firsts.append(t2 - t0)
        client.close()
    return opens, firsts


@scenario("memory", "Server memory per session")
def run_memory(ctx: Context) -> Section:
    """Server RSS before and after opening N sessions, against N in-process environments."""
    opts = ctx.options
    section = Section("memory", "Server memory per session", MEMORY_COLUMNS)
    n = opts.memory_sessions
    work = ctx.workload(opts.games[0], opts.obs_types[0], 1)
    base = {"game": work.game, "obs": work.obs_type, "sessions": n}
    ctx.progress.start(section.title, 2)
    ctx.progress.phase(f"in-process: {n} environments")
    section.add(**base, path="in-process", **_inprocess_memory(work, n), vs_inprocess=1.0)
    reference = section.rows[-1]["per_session_mb"]
    ctx.progress.phase(f"openenv-ws server: {n} sessions")
    # No warm pool: its ready environments would count as the sessions' memory.
    args = pool_args(0) if supports_pool() else []
    with our_server(ctx.placements()[0], args) as server:
        assert server.process is not None
        row = _server_memory(server.url, server.process.pid, work, n)
    row["vs_inprocess"] = row["per_session_mb"] / reference
    section.add(**base, path="openenv-ws server", **row)
    section.notes.append(
        "RSS of the server process after one session was opened and closed (imports and "
        "first-use costs are paid), then with N sessions open and reset; in-process: the "
        "same for N AtariEnvironment instances in a fresh process."
    )
    return section


def _inprocess_memory(work: Workload, n: int) -> dict[str, float]:
    """RSS growth of a fresh process for `n` environments, as the server is a fresh process.

    Measured in this process, it would read the memory earlier scenarios freed
    and the allocator hands back without the RSS growing.
    """
    code = (
        "import json, sys; from benchmarks.scenarios.sessions import environments_rss; "
        "print(json.dumps(environments_rss(json.loads(sys.argv[1]), int(sys.argv[2]), "
        "int(sys.argv[3]))))"
    )
    args = [json.dumps(work.config), str(n), str(work.seed)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    return _memory_row(before, after, n)


def environments_rss(config: dict[str, Any], n: int, seed: int) -> tuple[int, int]:
    """This process's RSS before and after making and resetting `n` environments
    (after one made and closed, so imports and first-use costs are paid)."""
    import os

    from atari import AtariEnvironment

    warm = AtariEnvironment(config)
    warm.reset(seed=seed)
    warm.close()
    before = rss_bytes(os.getpid())
    envs = [AtariEnvironment(config) for _ in range(n)]
    for env in envs:
        env.reset(seed=seed)
    after = rss_bytes(os.getpid())
    for env in envs:
        env.close()
    return before, after


def _server_memory(url: str, pid: int, work: Workload, n: int) -> dict[str, float]:
    first: EnvClient[Any]
    with EnvClient(url, config=work.config) as first:
        first.reset(seed=work.seed)
    before = rss_bytes(pid)
    clients: list[EnvClient[Any]] = []
    try:
        for _ in range(n):
            clients.append(EnvClient(url, config=work.config))
            clients[-1].reset(seed=work.seed)
        after = rss_bytes(pid)
    finally:
        for client in clients:
            client.close()
    return _memory_row(before, after, n)


def _memory_row(before: int, after: int, n: int) -> dict[str, float]:
    mb = 1 << 20
    return {
        "before_mb": before / mb,
        "after_mb": after / mb,
        "per_session_mb": (after - before) / n / mb,
    }
