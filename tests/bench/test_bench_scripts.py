"""The standalone server-efficiency scripts run to the end and print their table.

``benchmarks/bench_vector.py`` (16 pipelined sessions against in-process ALE),
``benchmarks/bench_churn.py`` (sessions coming and going next to one that steps),
``benchmarks/bench_frame_cache.py`` (what writing frames into shared regions
costs the emulator), ``benchmarks/bench_ale_inprocess.py`` (the
environment wrapper's own cost), ``benchmarks/bench_floor.py`` (a bare
request/reply against ours with a zero-cost environment) and
``benchmarks/bench_hostile.py`` (floods, cold opens and a slowloris next to a
session that steps) back figures quoted in the README and the issues; a short
run of each keeps them working. No timing assertions: each row must be there
with positive numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"([0-9][0-9.]*)"


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _positive_row(out: str, pattern: str, what: str) -> None:
    """The line of `out` that `pattern` matches exists and its numbers are positive."""
    row = re.search(pattern, out, re.M)
    assert row is not None, f"no row for {what}:\n{out}"
    assert all(float(v) > 0 for v in row.groups() if v is not None)


def _two_cores() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("these scripts pin a server and a client to two different cores")


def test_bench_vector_prints_every_contender_with_a_ratio() -> None:
    _two_cores()
    out = _run("bench_vector.py", "--envs", "4", "--steps", "200", "--rounds", "1", "--full-colour")
    names = (
        "in-process, 1 env",
        "in-process, 4 envs round-robin",
        "websocket, 4 sessions",
        "websocket, same, RGB frames",
    )
    for name in names:
        pattern = rf"^{re.escape(name)}.*?\s{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}$"
        _positive_row(out, pattern, repr(name))
    assert re.search(rf"server efficiency \(steps/s\): {NUMBER}x", out), out


def test_bench_frame_cache_prints_each_session_count() -> None:
    _two_cores()
    out = _run("bench_frame_cache.py", "--sessions", "1", "3", "--steps", "100", "--rounds", "1")
    for n in (1, 3):
        pattern = (
            rf"^\s+{n}\s+{NUMBER} us\s+{NUMBER} us \({NUMBER}x\)\s+{NUMBER} us \({NUMBER}x\)"
            rf"\s+{NUMBER} us \({NUMBER}x\)$"
        )
        _positive_row(out, pattern, f"{n} sessions")


def test_bench_ale_inprocess_prints_the_wrapper_cost() -> None:
    out = _run("bench_ale_inprocess.py", "--steps", "100", "--rounds", "1", "--only", "steps")
    for name in ("raw act x4 + obs", "env.step", "server session"):
        row = re.search(rf"^{re.escape(name)}\s+{NUMBER}\s+{NUMBER}\s+-?{NUMBER}\s", out, re.M)
        assert row is not None, f"no row for {name!r}:\n{out}"
        assert float(row.group(1)) > 0
    for name in ("raw loop (idle)", "env.step (idle)"):
        assert re.search(rf"^{re.escape(name)}\s+{NUMBER} ns", out, re.M), f"no {name!r}:\n{out}"


def test_bench_churn_prints_each_server_and_its_rom_loads() -> None:
    _two_cores()
    out = _run("bench_churn.py", "--steps", "300", "--episode", "20")
    names = [
        "in-process step (reference)",
        "pool, recycling, no churn (reference)",
        "no pool, churn",
        "pool, no recycling, churn",
        "pool, recycling, churn",
        "pool, recycling, no gc freeze, churn",
    ]
    rows = {}
    for name in names:
        row = re.search(rf"^{re.escape(name)}((?:\s+{NUMBER}){{10}})$", out, re.M)
        assert row is not None, f"no row for {name!r}:\n{out}"
        rows[name] = [float(v) for v in row.group(1).split()]
        assert all(v > 0 for v in rows[name][:3])  # p50, p99, max
    # ROM loads are counts, not timings: without a pool every churned session loads one
    # (and one still open when the steady session ends may have loaded too).
    no_pool = rows["no pool, churn"]
    assert no_pool[5] > 0 and no_pool[7] >= 100, out


def test_bench_floor_prints_both_contenders_in_each_placement() -> None:
    _two_cores()
    out = _run("bench_floor.py", "--steps", "300", "--rounds", "1")
    for placement in ("shared", "split", "split, polling"):
        for contender in ("bare TCP", "openenv-ws, zero-cost env"):
            pattern = (
                rf"^{re.escape(placement)}\s+{re.escape(contender)}\s+{NUMBER}\s+{NUMBER}\s+"
                rf"{NUMBER}x$"
            )
            _positive_row(out, pattern, f"{placement!r}, {contender!r}")


def test_bench_expand_prints_every_kernel_against_ale() -> None:
    from openenv_ws import _palette

    out = _run("bench_expand.py", "--frames", "20", "--rounds", "1", "--repeats", "2")
    names = ["ALE getScreenRGB", "ALE getScreen", "expand, numpy"]
    if _palette.NATIVE:
        from openenv_ws._expand import KERNEL

        names += [f"expand, {KERNEL}", "expand, portable"]
    for name in names:
        _positive_row(out, rf"^{re.escape(name)}\s+{NUMBER}\s+{NUMBER}x$", repr(name))


def test_bench_hostile_prints_every_phase_and_what_the_attacks_did() -> None:
    out = _run(
        "bench_hostile.py",
        "--quick",
        "--seconds",
        "2",
        "--flood-seconds",
        "2",
        "--slowloris",
        "200",
    )
    base = "baseline (no attack)"
    _positive_row(out, rf"^{re.escape(base)}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}", base)
    labels = (
        "pong flood, 4 MiB writes",
        "ping flood, 1 conn, reads",
        "cold opens, 1 raw client",
        "slowloris, 200 conns",
        "ping flood, 10 conns, never read",
        "after (no attack)",
    )
    for label in labels:
        # A stalled neighbour may take no step in a phase (nan), but the row is there.
        assert re.search(rf"^{re.escape(label)}\s+{NUMBER}\s+\d+\s", out, re.M), (
            f"{label!r}:\n{out}"
        )
    assert re.search(r"^  [0-9.]+ MiB sent \(\d+ frames\)", out, re.M), out
    assert re.search(r"^  \d+ opens \(", out, re.M), out
    assert re.search(r"^  held \d+/200 at peak", out, re.M), out
    assert re.search(r"^  /health answered \d+/\d+ \(", out, re.M), out
    assert re.search(r"^  server RSS \d+ MB before, peak \d+ MB", out, re.M), out
