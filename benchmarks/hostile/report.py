"""The hostile run's figures: a row per phase, what each attack did, and verdicts.

A verdict line sets a phase's figures against its target: the neighbour's
step p99 at 5 ms or less under floods, opens and heavy sessions (as measured,
and corrected for coordinated omission: see :func:`corrected`); RSS within
50 MB of its start during the never-read flood; every ``/health`` probe
answered during the slowloris and the idle TLS connections; the largest
sessions' RSS within the byte budget ``/health`` reports.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .harness import PhaseResult, budget_of
from .rawwire import MB

__all__ = [
    "P99_TARGET_MS",
    "RSS_GROWTH_TARGET_MB",
    "corrected",
    "details",
    "summarize",
    "verdicts",
]

#: The neighbour's step p99 under attack, at most (milliseconds).
P99_TARGET_MS = 5.0
#: Server RSS growth during the never-read flood, at most (MB).
RSS_GROWTH_TARGET_MB = 50.0

# Phases whose verdict is the neighbour's p99.
_P99_PHASES = ("pong", "ping", "opens", "vector-opens", "heavy", "flood")


def _pct(ms: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(ms, q)) if len(ms) else float("nan")


def corrected(ms: np.ndarray[Any, Any], interval: float) -> np.ndarray[Any, Any]:
    """`ms` with the steps a neighbour stepping every `interval` ms would have started during
    each longer step (waiting d - interval, d - 2 interval, ... ms): HdrHistogram's correction
    for coordinated omission. A closed loop starts no step while one stalls, so its own p99
    hides a stall of seconds; this one does not."""
    if not interval > 0 or not len(ms):
        return ms
    missed = [np.arange(d - interval, interval, -interval) for d in ms[ms > 2 * interval]]
    return np.concatenate([ms, *missed]) if missed else ms


def _steps(
    starts: np.ndarray[Any, Any],
    seconds: np.ndarray[Any, Any],
    t0: float,
    t1: float,
    interval: float = 0.0,
) -> dict[str, Any]:
    """The neighbour's steps started in [t0, t1): count, p50, p99, max (ms), and the p99
    corrected for coordinated omission (steps expected every `interval` ms)."""
    inside = (starts >= t0) & (starts < t1)
    ms = seconds[inside] * 1e3
    return {
        "steps": int(inside.sum()),
        "p50_ms": _pct(ms, 50),
        "p99_ms": _pct(ms, 99),
        "p99_co_ms": _pct(corrected(ms, interval), 99),
        "max_ms": float(ms.max()) if len(ms) else float("nan"),
    }


def summarize(
    results: list[PhaseResult],
    starts: np.ndarray[Any, Any],
    seconds: np.ndarray[Any, Any],
    errors: list[tuple[float, str]],
) -> list[dict[str, Any]]:
    """A row per phase; an attack's ``windows`` (e.g. heavy sessions stepping) get theirs.

    The first result is the baseline: its mean step is the interval of the
    corrected p99 (:func:`corrected`).
    """
    rows = []
    base = _steps(starts, seconds, results[0].t0, results[0].t1) if results else {}
    interval = 1e3 * (results[0].t1 - results[0].t0) / base["steps"] if base.get("steps") else 0.0
    for r in results:
        windows = {
            name: {"seconds": b - a, **_steps(starts, seconds, a, b, interval)}
            for name, (a, b) in r.attack.get("windows", {}).items()
        }
        rows.append(
            {
                "phase": r.phase.key,
                "label": r.phase.label,
                "seconds": r.t1 - r.t0,
                **_steps(starts, seconds, r.t0, r.t1, interval),
                "errors": [e for t, e in errors if r.t0 <= t < r.t1 + 1.0],
                "rss_before_mb": r.rss_before / MB,
                "rss_peak_mb": r.rss_peak / MB,
                "rss_cap_mb": r.rss_cap / MB,
                "budget": r.budget,
                "attack": r.attack,
                "probes": r.probes,
                "windows": windows,
                "notes": r.notes,
            }
        )
    return rows


def _r(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}"


def _timing(name: str, figures: dict[str, float | None]) -> str:
    return f"{name} p50 {_r(figures['p50'])} / max {_r(figures['max'])} ms"


def _health(name: str, probes: dict[str, Any]) -> str:
    n, ok = probes["health_probes"], probes["health_answered"]
    frac = 100.0 * ok / n if n else 0.0
    lat = (
        f"latency p50 {probes['health_ms_p50']:.1f} / p99 {probes['health_ms_p99']:.1f} "
        f"/ max {probes['health_ms_max']:.1f} ms"
        if ok
        else "no answer"
    )
    return f"{name} answered {ok}/{n} ({frac:.1f}%), {lat}; failures: " + str(
        probes["health_failures"] or "none"
    )


def _held(attack: dict[str, Any]) -> str:
    return (
        f"held {attack['peak_connected']}/{attack['target']} at peak "
        f"({attack['peak_after_s']:.1f} s in), {attack['connected_at_end']} at the end; "
        f"ended by the server: {attack['ended_by_server'] or 'none'}; "
        f"connect failures: {attack['connect_failures'] or 'none'}"
    )


def _budget(figures: dict[str, float]) -> str:
    if not figures:
        return "n/a (/health reports no budget or bytes)"
    return ", ".join(
        f"{path} {value:,.0f} ({value / MB:,.0f} MB)" for path, value in figures.items()
    )


def _session_attack(row: dict[str, Any]) -> list[str]:
    """What a vector-open, heavy or largest attack did."""
    attack, key = row["attack"], row["phase"]
    if key == "vector-opens":
        rate = attack["attempts"] / row["seconds"] if row["seconds"] else 0.0
        return [
            f"{attack['attempts']} opens ({rate:.2f}/s): {attack['outcomes']}; "
            f"{_timing('open', attack['open_ms'])}, {_timing('reset', attack['reset_ms'])}"
        ]
    lines = [f"config {attack['config']}"]
    if attack["skipped"]:
        lines.append(f"configs refused first: {attack['skipped']}")
    if key == "heavy":
        lines.append(
            f"{attack['sessions']} sessions opened ({_timing('open', attack['open_ms'])}), "
            f"{_timing('reset', attack['reset_ms'])}; {attack['steps']} steps (obs false) "
            f"in rounds of one per session ({_timing('round', attack['round_ms'])}); "
            f"outcomes: {attack['outcomes']}"
        )
        for name, w in row["windows"].items():
            lines.append(
                f"while all {name} ({w['seconds']:.1f} s): neighbour {w['steps']} steps, "
                f"p50 {_r(w['p50_ms'])} / p99 {_r(w['p99_ms'])} / max {_r(w['max_ms'])} ms"
            )
        return lines
    envs = f" of {attack['num_envs']} envs" if attack["num_envs"] else ""
    growth = row["rss_peak_mb"] - row["rss_before_mb"]
    per = growth / attack["admitted"] if attack["admitted"] else float("nan")
    lines += [
        f"{attack['admitted']} sessions{envs} admitted and reset, then closed "
        f"({_timing('open', attack['open_ms'])}, {_timing('reset', attack['reset_ms'])}); "
        f"ended: {attack['ended']}; refusal: {attack['refusal'] or 'none'}",
        f"server RSS {row['rss_before_mb']:.0f} MB before, peak {row['rss_peak_mb']:.0f} MB "
        f"(+{growth:.0f} MB, {_r(per)} MB a session; phase cap {row['rss_cap_mb']:.0f} MB)",
        f"budget from /health at the start: {_budget(row['budget'])}",
    ]
    if "health_at_refusal" in attack:
        lines.append(f"/health at the refusal: {_budget(attack['health_at_refusal'])}")
    return lines


def details(row: dict[str, Any]) -> list[str]:
    """What the attack did and what the probes saw, in sentences."""
    details = []
    attack, probes = row["attack"], row["probes"]
    if "error" in attack:
        details.append(f"the attacker failed: {attack['error']}")
    elif row["phase"] in ("vector-opens", "heavy", "largest", "largest-vector") and attack:
        details += _session_attack(row)
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
        details.append(_held(attack))
    if "tls" in probes:
        details.append(_health("TLS /health (its server)", probes["tls"]))
        details.append(_health("plain /health (the neighbour's server)", probes["plain"]))
    elif probes:
        details.append(_health("/health", probes))
        for source, got in probes["new_clients"].items():
            details.append(f"new clients from {source}: {got}")
    if row["phase"] == "flood":
        growth = row["rss_peak_mb"] - row["rss_before_mb"]
        details.append(
            f"server RSS {row['rss_before_mb']:.0f} MB before, peak {row['rss_peak_mb']:.0f}"
            f" MB (+{growth:.0f} MB; target +{RSS_GROWTH_TARGET_MB:.0f} MB at most)"
        )
    if row["errors"]:
        details.append(f"neighbour errors: {row['errors'][:3]}")
    details += row["notes"]
    return details


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _p99_verdict(row: dict[str, Any]) -> str:
    figures, where = row, ""
    if row["windows"]:
        name, figures = next(iter(row["windows"].items()))
        where = f" while all {name}"
    p99, co = figures["p99_ms"], figures["p99_co_ms"]
    ok = p99 <= P99_TARGET_MS and co <= P99_TARGET_MS and not row["errors"]  # nan: False
    errors = f", {len(row['errors'])} neighbour errors" if row["errors"] else ""
    return (
        f"neighbour step p99{where} {_r(p99)} ms (corrected for coordinated omission "
        f"{_r(co)} ms), max {_r(figures['max_ms'])} ms{errors} "
        f"(target p99 <= {P99_TARGET_MS:g} ms, both): {_met(ok)}"
    )


def _answered(name: str, probes: dict[str, Any]) -> tuple[str, bool]:
    n, ok = probes["health_probes"], probes["health_answered"]
    return (
        f"{name} answered {ok}/{n}, max {_r(probes['health_ms_max'])} ms",
        n > 0 and ok == n,
    )


def _largest_verdict(row: dict[str, Any]) -> str:
    attack = row["attack"]
    budget = budget_of(row["budget"])
    refused = attack.get("ended") == "refused"
    said = (
        f"{attack.get('admitted', 0)} admitted, "
        + (f"refused: {attack['refusal']}" if refused else f"not refused ({attack.get('ended')})")
        + f"; server RSS peak {row['rss_peak_mb']:.0f} MB"
    )
    if budget is None:
        return f"{said} vs budget n/a (target: within the byte budget): n/a"
    ok = refused and row["rss_peak_mb"] * MB <= budget
    return (
        f"{said} vs budget {budget / MB:,.0f} MB (target: refused with capacity, "
        f"RSS within the budget): {_met(ok)}"
    )


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """A line per phase with a target: its figures, the target and met or MISSED (and a
    warning first when the baseline itself misses the p99 target: a noisy machine)."""
    lines = []
    if rows and not (rows[0]["p99_ms"] <= P99_TARGET_MS and rows[0]["p99_co_ms"] <= P99_TARGET_MS):
        lines.append(
            f"verdicts on a noisy machine: with no attack the neighbour's p99 was "
            f"{_r(rows[0]['p99_ms'])} ms ({_r(rows[0]['p99_co_ms'])} ms corrected), max "
            f"{_r(rows[0]['max_ms'])} ms, already above the {P99_TARGET_MS:g} ms target; the "
            "p99 verdicts below cannot tell the attack from the machine"
        )
    for row in rows:
        key, probes = row["phase"], row["probes"]
        said: list[str] = []
        if key in _P99_PHASES:
            said.append(_p99_verdict(row))
        if key == "flood":
            growth = row["rss_peak_mb"] - row["rss_before_mb"]
            said.append(
                f"RSS +{growth:.0f} MB (target +{RSS_GROWTH_TARGET_MB:g} MB at most): "
                f"{_met(growth <= RSS_GROWTH_TARGET_MB)}"
            )
        if key == "slowloris" and probes:
            text, ok = _answered("/health", probes)
            said.append(f"{text} (target: every probe): {_met(ok)}")
        if key == "tls-idle" and probes:
            (tls, tls_ok), (plain, plain_ok) = (
                _answered("TLS /health", probes["tls"]),
                _answered("plain /health", probes["plain"]),
            )
            said.append(f"{tls}, {plain} (target: every probe): {_met(tls_ok and plain_ok)}")
        if key in ("largest", "largest-vector") and "admitted" in row["attack"]:
            said.append(_largest_verdict(row))
        if said:
            lines.append(f"verdict, {row['label']}: " + "; ".join(said) + ".")
    return lines
