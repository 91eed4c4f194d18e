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
- ``vector``: a raw client opening a vector session of 64 Atari envs,
  resetting it and closing it, in a loop (each env a ROM load);
- ``heavy``: 20 Atari sessions of the heaviest preprocessing (1024x1024
  grayscale, a stack of 16, up to 1,000 no-ops a reset) stepping without
  observations, one step each in turn;
- ``slowloris``: ``--slowloris`` connections, each trickling a never-ending
  upgrade request at ~1 byte/s (the attacker raises its descriptor limit to
  the hard limit; the server keeps what it inherits); meanwhile this process probes ``/health`` and
  tries new WebSocket handshakes, from 127.0.0.1 and from the attacker's
  address;
- ``ping flood, never read``: 10 connections sending 125-byte pings and
  never reading, for twice ``--hostile-seconds``; server RSS before and at its
  peak (the flood stops early if the server passes 4 GiB);
- ``after``: no attack again: did the server recover?

The neighbour steps in a closed loop: while it waits on a stalled step it
starts no other, so a few long stalls barely move p99. ``max ms`` and
``rate/base`` (its steps per second against the baseline's) show them.

Each attack ends by itself (a deadline; the attacker process is killed if it
overstays); connections the server ends are reopened, paced, until then. All
traffic goes to the server on 127.0.0.1. The targets: RSS within 50 MB of
baseline during a 60 s ping flood from 10 connections (the default
``--hostile-seconds 30``); the neighbour's step p99 at 5 ms or less under the
floods, the cold opens, the vector opens and the heavy sessions; ``/health``
answering throughout a 5,000-connection
slowloris.
"""

from __future__ import annotations

import math
import socket
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from openenv_ws.errors import ServerUnavailable

from ..hostile.harness import Bench, PhaseResult, Settings, phases
from ..hostile.rawwire import MB
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

COLUMNS = [
    Column("label", "phase"),
    Column("seconds", "s", ".1f"),
    Column("steps", "steps"),
    Column("p50_ms", "p50 ms", ".2f"),
    Column("p99_ms", "p99 ms", ".2f"),
    Column("max_ms", "max ms", ".1f"),
    Column("p50_vs_base", "p50/base", ".2f"),
    Column("p99_vs_base", "p99/base", ".2f"),
    Column("rate_vs_base", "rate/base", ".2f"),
    Column("errors", "errors"),
    Column("rss_mb", "RSS MB", ".0f"),
    Column("peak_mb", "peak MB", ".0f"),
]


def _pct(ms: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(ms, q)) if len(ms) else float("nan")


def summarize(
    results: list[PhaseResult],
    starts: np.ndarray[Any, Any],
    seconds: np.ndarray[Any, Any],
    errors: list[tuple[float, str]],
) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        inside = (starts >= r.t0) & (starts < r.t1)
        ms = seconds[inside] * 1e3
        errs = [e for t, e in errors if r.t0 <= t < r.t1 + 1.0]
        rows.append(
            {
                "phase": r.phase.key,
                "label": r.phase.label,
                "seconds": r.t1 - r.t0,
                "steps": int(inside.sum()),
                "p50_ms": _pct(ms, 50),
                "p99_ms": _pct(ms, 99),
                "max_ms": float(ms.max()) if len(ms) else float("nan"),
                "errors": errs,
                "rss_before_mb": r.rss_before / MB,
                "rss_peak_mb": r.rss_peak / MB,
                "attack": r.attack,
                "probes": r.probes,
                "notes": r.notes,
            }
        )
    return rows


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def details(row: dict[str, Any]) -> list[str]:
    """What the attack did and what the probes saw, in sentences."""
    details = []
    attack, probes = row["attack"], row["probes"]
    if "error" in attack:
        details.append(f"the attacker failed: {attack['error']}")
    elif "sent_mib" in attack:
        details.append(
            f"{attack['sent_mib']:.1f} MiB sent ({attack['frames']} frames) over "
            f"{attack['connections']} connection(s); ended by the server: "
            f"{attack['ended_by_server'] or 'none'}; close codes read: "
            f"{attack['close_codes'] or 'none'}; handshakes refused: "
            f"{attack['handshakes_refused'] or 'none'}"
        )
    elif "attempts" in attack:
        rate = attack["attempts"] / row["seconds"] if row["seconds"] else 0.0
        p50 = attack["open_ms_p50"]
        details.append(
            f"{attack['attempts']} opens ({rate:.1f}/s): {attack['outcomes']}; "
            f"open p50 {p50 if p50 is None else round(p50, 1)} ms, "
            f"max {attack['open_ms_max'] and round(attack['open_ms_max'], 1)} ms"
        )
    elif "peak_connected" in attack:
        details.append(
            f"held {attack['peak_connected']}/{attack['target']} at peak "
            f"({attack['peak_after_s']:.1f} s in), {attack['connected_at_end']} at the end; "
            f"ended by the server: {attack['ended_by_server'] or 'none'}; "
            f"connect failures: {attack['connect_failures'] or 'none'}"
        )
    if probes:
        n, ok = probes["health_probes"], probes["health_answered"]
        frac = 100.0 * ok / n if n else 0.0
        lat = (
            f"latency p50 {probes['health_ms_p50']:.1f} / p99 {probes['health_ms_p99']:.1f} "
            f"/ max {probes['health_ms_max']:.1f} ms"
            if ok
            else "no answer"
        )
        details.append(
            f"/health answered {ok}/{n} ({frac:.1f}%), {lat}; failures: "
            f"{probes['health_failures'] or 'none'}"
        )
        for source, got in probes["new_clients"].items():
            details.append(f"new clients from {source}: {got}")
    if row["phase"] == "flood":
        growth = row["rss_peak_mb"] - row["rss_before_mb"]
        details.append(
            f"server RSS {row['rss_before_mb']:.0f} MB before, peak {row['rss_peak_mb']:.0f}"
            f" MB (+{growth:.0f} MB; target +50 MB at most)"
        )
    if row["errors"]:
        details.append(f"neighbour errors: {row['errors'][:3]}")
    details += row["notes"]
    return details


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


def settings(seconds: float, slowloris: int) -> Settings:
    """The run for `seconds` per phase (twice that for the never-read flood)."""
    quick = seconds < 10
    address = "127.0.0.2" if _source_usable("127.0.0.2") else "127.0.0.1"
    return Settings(
        seconds=seconds,
        flood_seconds=2 * seconds,
        slowloris=slowloris,
        attacker_address=address,
        step_timeout=10.0 if quick else 30.0,
        settle_timeout=10.0 if quick else 30.0,
    )


@scenario("hostile", "Hostile peers next to an honest session", default=False)
def run(ctx: Context) -> Section:
    """Floods, cold opens and a slowloris next to a session stepping; server RSS, /health."""
    args = settings(ctx.options.hostile_seconds, ctx.options.slowloris)
    plan = phases(args)
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
        f"neighbour: pong, sync client, back to back; {bench.placement.describe()}."
    )
    for row in rows:
        lines = details(row)
        if lines:
            section.notes.append(f"{row['label']}: " + "; ".join(lines) + ".")
    skipped = [p.label for p in plan[len(results) :]]
    if skipped:
        section.notes.append(f"not run (the server was gone): {', '.join(skipped)}")
    return section
