"""Hostile traffic against a real server: its memory, ``/health`` and a neighbour's steps.

The attacks and the harness live in :mod:`benchmarks.hostile`.

An ``openenv-ws serve --env atari`` subprocess (pinned to the split
placement's server core when there are two) serves a *neighbour*: an honest
Pong session driven by the sync client in a process of its own (the client
core), stepping back to back for the whole run and timing every step. Attack
phases follow one another on that server, each from a process of its own (the
client core, niced, connecting from 127.0.0.2 when it can be bound, so that a
per-address limit can tell the attacker from the neighbour). Every step the neighbour *starts* during a phase counts for
that phase:

- ``baseline``: no attack; every ratio divides by this row's figures;
- ``pong flood``: one connection writing 6-byte pongs, 4 MiB
  per write, as fast as the server takes them;
- ``ping flood``: one connection sending empty pings as fast as it can,
  reading (and dropping) what comes back;
- ``cold opens``: a raw client opening sessions in a loop, each with a
  config no warm environment matches (the game cycled, ``max_episode_steps``
  never the same), closing each once answered;
- ``vector opens``: a raw client opening a vector session of 64 Pong envs
  (``num_envs``), resetting it and closing it, in a loop (an open under way
  when the phase's time is up is finished: the phase lasts until it is);
- ``heavy sessions``: ``--hostile-heavy`` (20) single sessions of the
  heaviest preprocessing (grayscale resized to 1024x1024, a stack of 16, up
  to 1,000 no-ops per reset), opened, reset, then stepped in rounds back to
  back (``obs`` false) for the phase's time; the verdict takes the
  neighbour's steps while all of them step;
- ``slowloris``: ``--slowloris`` connections, each trickling a never-ending
  upgrade request at ~1 byte/s (the attacker raises its descriptor limit to
  the hard limit; the server keeps what it inherits); meanwhile this process probes ``/health`` and
  tries new WebSocket handshakes, from 127.0.0.1 and from the attacker's
  address;
- ``TLS idle``: a second server, ``serve --certfile/--keyfile`` (a
  throwaway CA of trustme's) under a descriptor limit of 4096, takes
  ``--slowloris`` connections that never start TLS; meanwhile this process
  asks ``/health`` over TLS there and plain ``/health`` of the neighbour's
  server, each every 0.1 s;
- ``ping flood, never read``: 10 connections sending 125-byte pings and
  never reading, for twice ``--hostile-seconds``; server RSS before and at its
  peak (the flood stops early if the server passes 4 GiB);
- ``largest sessions``: single sessions of the largest observation the
  Atari bounds admit (grayscale 1024x1024, a stack of 16, max-pooling), each
  reset and held, opened until the server refuses one (``capacity``), then
  all closed: server RSS at its peak against the byte budget ``/health``
  reports (``n/a`` without one), the sessions admitted and the refusal;
- ``largest vector sessions``: the same with vector sessions of the most
  envs (64) of the largest observation one batch admits (a stack of 4); the
  two stop early once RSS grows by 60% of the memory available when they
  start (with a budget: by 90%, and at 1.25 times the budget); none starts a
  session after the phase's time;
- ``after``: no attack again: did the server recover?

The neighbour steps in a closed loop: while it waits on a stalled step it
starts no other, so a few long stalls barely move p99. ``max ms``,
``rate/base`` (its steps per second against the baseline's) and ``p99*``
(the p99 corrected for coordinated omission: the steps a neighbour stepping
at the baseline's rate would have started during each stall, counted too)
show them.

Each attack ends by itself (a deadline, a count; the attacker process is
killed if it overstays); connections the server ends are reopened, paced,
until then. All traffic goes to servers on 127.0.0.1. ``--hostile-phases``
picks phases (the baseline always runs first). The targets (a verdict line
each): RSS within 50 MB of baseline during a 60 s ping flood from 10
connections (the default ``--hostile-seconds 30``); the neighbour's step p99
at 5 ms or less under the floods, the cold and vector opens and the heavy
sessions; ``/health`` answering throughout a 5,000-connection slowloris and
throughout 5,000 idle connections on the TLS port (over TLS and plain); the
largest sessions refused with ``capacity`` while RSS is within the byte
budget.
"""

from __future__ import annotations

import math
import socket
import subprocess
from pathlib import Path

import psutil

from openenv_ws.errors import ServerUnavailable

from ..hostile import configs
from ..hostile.harness import Bench, PhaseResult, Settings, phases
from ..hostile.report import details, summarize, verdicts
from ..suite import Column, Context, Options, Section, scenario

__all__: list[str] = []

COLUMNS = [
    Column("label", "phase"),
    Column("seconds", "s", ".1f"),
    Column("steps", "steps"),
    Column("p50_ms", "p50 ms", ".2f"),
    Column("p99_ms", "p99 ms", ".2f"),
    Column("p99_co_ms", "p99* ms", ".2f"),
    Column("max_ms", "max ms", ".1f"),
    Column("p50_vs_base", "p50/base", ".2f"),
    Column("p99_vs_base", "p99/base", ".2f"),
    Column("rate_vs_base", "rate/base", ".2f"),
    Column("errors", "errors"),
    Column("rss_mb", "RSS MB", ".0f"),
    Column("peak_mb", "peak MB", ".0f"),
]


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


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


def settings(options: Options) -> Settings:
    """The run the options ask for: `hostile_seconds` per phase (twice that for the
    never-read flood), the phases and counts they name."""
    seconds = options.hostile_seconds
    quick = seconds < 10
    address = "127.0.0.2" if _source_usable("127.0.0.2") else "127.0.0.1"
    envs = configs.max_envs()
    return Settings(
        seconds=seconds,
        flood_seconds=2 * seconds,
        slowloris=options.slowloris,
        tls_conns=options.slowloris,
        phases=options.hostile_phases,
        heavy=options.hostile_heavy,
        heavy_configs=tuple(configs.heavy_configs()),
        largest_configs=tuple(configs.largest_configs()),
        largest_vector_configs=tuple(configs.largest_vector_configs(envs)),
        largest_envs=envs,
        largest_limit=configs.max_sessions(),
        attacker_address=address,
        step_timeout=10.0 if quick else 30.0,
        settle_timeout=10.0 if quick else 30.0,
    )


@scenario("hostile", "Hostile peers next to an honest session", default=False)
def run(ctx: Context) -> Section:
    """Floods, opens, heavy and large sessions and idle connections next to a session
    stepping; server RSS, /health."""
    args = settings(ctx.options)
    try:
        plan = phases(args)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from None
    section = Section("hostile", "Hostile peers next to an honest session", COLUMNS)
    ctx.progress.start(section.title, len(plan) + 1)
    ctx.progress.phase("server and neighbour")
    bench = Bench(args)
    results: list[PhaseResult] = []
    try:
        try:
            bench.start()
        except (ServerUnavailable, RuntimeError) as exc:
            raise RuntimeError(f"could not start: {exc}") from None
        assert bench.server.pid is not None
        limits = psutil.Process(bench.server.pid).rlimit(psutil.RLIMIT_NOFILE)
        for phase in plan:
            if not bench.server_alive():
                break
            ctx.progress.phase(phase.label)
            results.append(bench.run_phase(phase))
    finally:
        starts, seconds, errors = bench.finish()
    rows = summarize(results, starts, seconds, errors)
    base = rows[0]
    base_rate = _ratio(base["steps"], base["seconds"])
    for row in rows:
        rate = _ratio(row["steps"], row["seconds"])
        section.add(
            label=row["label"],
            seconds=row["seconds"],
            steps=row["steps"],
            p50_ms=_finite(row["p50_ms"]),
            p99_ms=_finite(row["p99_ms"]),
            p99_co_ms=_finite(row["p99_co_ms"]),
            max_ms=_finite(row["max_ms"]),
            p50_vs_base=_finite(_ratio(row["p50_ms"], base["p50_ms"])),
            p99_vs_base=_finite(_ratio(row["p99_ms"], base["p99_ms"])),
            rate_vs_base=_finite(_ratio(rate, base_rate)),
            errors=len(row["errors"]),
            rss_mb=_finite(row["rss_before_mb"]),
            peak_mb=_finite(row["rss_peak_mb"]),
        )
    section.notes.append(
        f"openenv-ws serve {' '.join(bench.serve_args)} at {_revision()}; server "
        f"RLIMIT_NOFILE {limits[0]}/{limits[1]}; attacker from {args.attacker_address}; "
        f"neighbour: pong, sync client, back to back; {bench.placement.describe()}; p99*: the "
        "p99 corrected for coordinated omission (a step every baseline mean step interval, "
        "HdrHistogram's correction)."
    )
    for row in rows:
        lines = details(row)
        if lines:
            section.notes.append(f"{row['label']}: " + "; ".join(lines) + ".")
    section.notes += verdicts(rows)
    skipped = [p.label for p in plan[len(results) :]]
    if skipped:
        section.notes.append(f"not run (the server was gone): {', '.join(skipped)}")
    return section
