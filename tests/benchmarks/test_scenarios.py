"""A tiny run of each scenario alone, so that none rots.

Each runs through ``python -m benchmarks --scenarios NAME`` with the smallest
sizes that still exercise every contender (the scenarios of a plain run with
one observation type on a shared core; ``test_bench_smoke.py`` runs them all
together with every option). No timing assertions: the scenario must run (not
fail, not stay pending on this build) and its table must hold every expected
row with positive numbers.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import openenv_ws.client
from benchmarks.peers.bare_vector import bare_server
from benchmarks.scenarios.rollout import FLOOR, SETTINGS, ale_options
from benchmarks.suite import SCENARIOS


def bench(tmp_path: Path, name: str, *args: str) -> dict[str, Any]:
    """Run scenario `name` alone; its section of report.json."""
    cmd = [
        sys.executable, "-m", "benchmarks",
        "--scenarios", name,
        "--no-plots",
        "--out", str(tmp_path),
        "--rounds", "1",
        *args,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads((tmp_path / "report.json").read_text())
    (section,) = report["sections"]
    assert section["name"] == name
    assert section["status"] == "ok", f"{name}: {section['status']}: {section['reason']}"
    keys = {c["key"] for c in section["columns"]} | {"mean_us"}  # latency rows keep a mean
    for row in section["rows"]:
        assert set(row) <= keys, f"{name}: row keys {set(row) - keys} have no column"
    return dict(section)


def rows_by(section: dict[str, Any], key: str = "path") -> dict[str, dict[str, Any]]:
    return {row[key]: row for row in section["rows"]}


def positive(row: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = row.get(key)
        assert isinstance(value, int | float) and value > 0, f"{key}={value!r} in {row}"


def needs_two_cores() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("these scenarios pin a server and a client to two different cores")


#: Scenarios that need a peer, an engine or a cluster: checked by test_bench_smoke.py only.
HEAVY = {"openenv", "docker", "ray"}
#: One observation type on one core, a few steps: the scenarios of a plain run.
SMALL = ("--obs-types", "ram", "--placement", "shared", "--steps", "20")


def test_every_scenario_has_a_smoke_test() -> None:
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    missing = set(SCENARIOS) - HEAVY - tested
    assert not missing, f"no smoke test for {sorted(missing)}"
    assert all(SCENARIOS[name].default for name in HEAVY)


def test_latency(tmp_path: Path) -> None:
    rows = rows_by(bench(tmp_path, "latency", *SMALL, "--clients", "sync,async"))
    assert set(rows) == {"in-process", "openenv-ws sync", "openenv-ws async"}
    for row in rows.values():
        positive(row, "p50_us", "p99_us", "steps_per_s", "vs_inprocess")


def test_throughput(tmp_path: Path) -> None:
    rows = bench(tmp_path, "throughput", *SMALL, "--sessions", "1,2")["rows"]
    assert {(r["mode"], r["sessions"]) for r in rows} == {
        (mode, n) for mode in ("step", "send/recv") for n in (1, 2)
    }
    for row in rows:
        positive(row, "steps", "steps_per_s", "vs_inprocess")


def test_open(tmp_path: Path) -> None:
    rows = rows_by(bench(tmp_path, "open", *SMALL, "--open-count", "2"))
    assert set(rows) == {
        "in-process: load + reset",
        "openenv-ws cold: connect + open + reset",
        "openenv-ws warm: connect + open + reset",
    }
    for row in rows.values():
        positive(row, "open_p50_ms", "p50_ms", "vs_inprocess")


def test_memory(tmp_path: Path) -> None:
    rows = rows_by(bench(tmp_path, "memory", *SMALL, "--memory-sessions", "2"))
    assert set(rows) == {"in-process", "openenv-ws server"}
    for row in rows.values():
        positive(row, "before_mb", "after_mb", "per_session_mb")


def test_http(tmp_path: Path) -> None:
    rows = rows_by(bench(tmp_path, "http", *SMALL))
    assert set(rows) == {"in-process", "openenv-ws sync (WebSocket)", "openenv-ws HTTP fallback"}
    for row in rows.values():
        positive(row, "p50_us", "steps_per_s", "vs_inprocess")


def test_vector(tmp_path: Path) -> None:
    needs_two_cores()
    section = bench(tmp_path, "vector", "--vector-envs", "3", "--steps", "60", "--obs-types", "rgb")
    rows = rows_by(section)
    assert set(rows) == {
        "in-process, 1 env",
        "in-process, 3 envs round-robin",
        "openenv-ws, 3 sessions send/recv",
        "openenv-ws, same, RGB frames",
    }
    for row in rows.values():
        positive(row, "steps_per_s", "vs_inprocess", "cpu_us", "cpu_vs_inprocess")
    positive(rows["openenv-ws, 3 sessions send/recv"], "batch")


@pytest.mark.slow
def test_churn(tmp_path: Path) -> None:
    needs_two_cores()
    rows = rows_by(bench(tmp_path, "churn", "--steps", "100"))
    assert list(rows) == [
        "in-process step (reference)",
        "pool, recycling, no churn (reference)",
        "no pool, churn",
        "pool, no recycling, churn",
        "pool, recycling, churn",
        "pool, recycling, no gc freeze, churn",
    ]
    for row in rows.values():
        positive(row, "p50_ms", "p99_ms", "max_ms", "p99_vs_quiet")
    # ROM loads are counts, not timings: without a pool every churned session loads one.
    no_pool = rows["no pool, churn"]
    positive(no_pool, "sessions_per_s", "rom_loads")
    assert no_pool["loads_per_100"] >= 100 * (no_pool["rom_loads"] - 1) / no_pool["rom_loads"]


def test_supervision(tmp_path: Path) -> None:
    rows = bench(tmp_path, "supervision", "--steps", "200")["rows"]
    assert len(rows) == 4
    for row in rows:
        positive(row, "ns", "vs_reference")


def test_codec(tmp_path: Path) -> None:
    rows = rows_by(bench(tmp_path, "codec", "--steps", "150"))
    assert set(rows) == {"encode", "decode"}
    for row in rows.values():
        positive(row, "ours_us", "reference_us", "vs_reference")


def test_framing(tmp_path: Path) -> None:
    rows = {(r["size"], r["path"]): r for r in bench(tmp_path, "framing", "--steps", "150")["rows"]}
    paths = {
        "read masked (server)",
        "read unmasked (client)",
        "build unmasked (server)",
        "build masked (client)",
    }
    assert set(rows) == {(size, path) for size in (60, 30_000) for path in paths}
    for row in rows.values():
        positive(row, "ours_us", "reference_us", "vs_reference")


def test_expand(tmp_path: Path) -> None:
    from openenv_ws import palette

    rows = rows_by(bench(tmp_path, "expand", "--steps", "100"))
    names = {"ALE getScreenRGB", "ALE getScreen", "expand, numpy"}
    if palette.NATIVE:
        from openenv_ws._expand import KERNEL

        names |= {f"expand, {KERNEL}", "expand, portable"}
    assert set(rows) == names
    for row in rows.values():
        positive(row, "us", "vs_reference")


def test_floor(tmp_path: Path) -> None:
    needs_two_cores()
    rows = bench(tmp_path, "floor", "--steps", "100")["rows"]
    got = {(row["placement"], row["path"]) for row in rows}
    assert got == {
        (placement, contender)
        for placement in ("shared", "split", "split, polling")
        for contender in ("bare TCP", "openenv-ws, zero-cost env")
    }
    for row in rows:
        positive(row, "p50_us", "mean_us", "vs_bare")


@pytest.mark.slow
def test_hostile(tmp_path: Path) -> None:
    args = ("--hostile-seconds", "1", "--slowloris", "50", "--hostile-heavy", "2")
    section = bench(tmp_path, "hostile", *args)
    rows = rows_by(section, "label")
    assert list(rows) == [
        "baseline (no attack)",
        "pong flood, 4 MiB writes",
        "ping flood, 1 conn, reads",
        "cold opens, 1 raw client",
        "vector opens, 64 envs, reset",
        "heavy sessions, 2 stepping",
        "slowloris, 50 conns",
        "TLS port, 50 idle conns",
        "ping flood, 10 conns, never read",
        "largest single sessions, until refused",
        "largest vector sessions, 64 envs, until refused",
        "after (no attack)",
    ]
    positive(rows["baseline (no attack)"], "steps", "p50_ms", "p99_ms", "p99_co_ms", "rss_mb")
    assert rows["baseline (no attack)"]["errors"] == 0, section["notes"]
    for row in rows.values():
        positive(row, "seconds", "peak_mb")  # a stalled neighbour may take no step in a phase
    notes = "\n".join(section["notes"])
    said = [
        "MiB sent (", " opens (", "held ", "/health answered ", "server RSS ",
        "1 opens (", "'opened, reset': 1",  # a vector open, reset
        "2 sessions opened", "while all stepping",  # the heavy sessions, stepping
        "TLS /health (its server) answered", "plain /health (the neighbour's server) answered",
        "'stack_num': 16", "'stack_num': 4", "budget from /health at the start: ",
        "sessions admitted and reset", "sessions of 64 envs admitted and reset",
    ]  # fmt: skip
    for part in said:
        assert part in notes, f"{part!r} not in:\n{notes}"
    verdicts = [line for line in section["notes"] if line.startswith("verdict, ")]
    assert len(verdicts) == 10, verdicts  # every phase but the baseline and after
    assert all(line.endswith(("met.", "MISSED.", "n/a.")) for line in verdicts), verdicts


def test_hostile_phases(tmp_path: Path) -> None:
    """--hostile-phases runs the baseline and the phases named, in that order."""
    args = ("--hostile-seconds", "1", "--hostile-phases", "after,ping")
    rows = rows_by(bench(tmp_path, "hostile", *args), "label")
    assert list(rows) == ["baseline (no attack)", "after (no attack)", "ping flood, 1 conn, reads"]


def test_wrapper(tmp_path: Path) -> None:
    args = ("--steps", "200", "--obs-types", "rgb")
    rows = {(r["what"], r["path"]): r for r in bench(tmp_path, "wrapper", *args)["rows"]}
    steps = {"raw act x4", "raw act x4 + obs", "env.step(obs=False)", "env.step", "server session"}
    idle = {"raw loop (idle)", "env.step (idle)", "env.step(obs=False) (idle)"}
    resets = {"seeded, restore", "seeded, reload ROM", "unseeded"}
    assert {("step, CPU µs", name) for name in steps} <= set(rows)
    assert {("idle step, CPU ns", name) for name in idle} <= set(rows)
    assert {("reset, ms", name) for name in resets} <= set(rows)
    for row in rows.values():
        positive(row, "value", "vs_reference")
    for name in resets:
        positive(rows[("reset, ms", name)], "stall_ms")


def needs_netns() -> None:
    """Skip without root, ip and tc (in CI, which runs as root, a skip is a failure)."""
    from benchmarks import netns

    why = netns.unavailable()
    if why is not None:
        pytest.skip(f"the remote scenario: {why}")


@pytest.mark.slow
@pytest.mark.exclusive("netns")  # as tests/benchmarks/test_netns.py: it cleans stale namespaces
def test_remote(tmp_path: Path) -> None:
    from benchmarks import netns
    from benchmarks.servers import client_keywords, serve_supports
    from openenv_ws.client import EnvClient

    needs_netns()
    needs_two_cores()  # split placement: the busy-polling row needs a core per side
    args = ("--steps", "20", "--peer-steps", "5", "--placement", "split")
    section = bench(tmp_path, "remote", *args)
    params = client_keywords(EnvClient)
    compression = "compression" in params and "delta" in params
    tls = serve_supports("--certfile") and "ca_file" in params
    optional = {
        "openenv-ws default": compression,
        "openenv-ws lz4": compression,
        "openenv-ws lz4, delta": compression,
        "openenv-ws zstd": compression,
        "openenv-ws zstd, delta": compression,
        "openenv-ws TLS, default options": tls,
        "openenv-ws default, both busy-polling": compression,
    }
    always = ["in-process", "openenv-ws raw", "OpenEnv WS (its server and client)"]
    blocks = {(row["game"], row["link"]) for row in section["rows"]}
    assert blocks == {
        (g, link) for g in ("pong", "breakout") for link in ("1 Gbit/s", "100 Mbit/s")
    }
    for block in blocks:
        rows = {r["path"]: r for r in section["rows"] if (r["game"], r["link"]) == block}
        assert set(rows) == {*always, *optional}
        for path, row in rows.items():
            if not optional.get(path, True):
                assert row["note"].startswith("pending: "), row
                continue
            positive(row, "p50_us", "p99_us", "steps_per_s", "vs_inprocess")
            if path != "in-process":
                positive(row, "down_bytes", "up_bytes")
        assert rows["openenv-ws raw"]["mode"] == "none"
        assert rows["openenv-ws raw"]["down_bytes"] > 20 * 1000  # a colour-code frame a step
        assert "permessage-deflate" in rows["OpenEnv WS (its server and client)"]["mode"]
        if compression:
            assert rows["openenv-ws lz4, delta"]["mode"] == "lz4+delta"
            assert rows["openenv-ws zstd"]["mode"] == "zstd"
    assert not netns.leftovers(), "the run left its namespace or veth pair behind"


def _builds(config: dict[str, Any]) -> bool:
    """Whether a single Atari session of this build takes `config`."""
    from atari import AtariEnvironment

    try:
        AtariEnvironment(config).close()
    except Exception:  # noqa: BLE001 - any refusal means the part is not built yet
        return False
    return True


def test_rollout(tmp_path: Path) -> None:
    args = ("--rollout-envs", "2", "--rollout-seconds", "0.1")
    section = bench(tmp_path, "rollout", *args)
    vector_session = hasattr(openenv_ws.client, "VectorSessionClient")
    try:
        importlib.import_module("envpool")
        envpool = True
    except Exception:  # noqa: BLE001 - the row must then say why instead
        envpool = False
    for setting in SETTINGS:
        rows = {r["path"]: r for r in section["rows"] if r["setting"] == setting.name}
        single = _builds({"game": "pong", **setting.config})
        expected = {
            "in-process AtariVectorEnv": True,
            "EnvPool": envpool,
            "Gymnasium AsyncVectorEnv": True,
            "Gymnasium SyncVectorEnv": True,
            "openenv-ws VectorEnvClient.step, serve --workers 1": single,
            "openenv-ws VectorEnvClient.step, serve --workers 2": single,
            "openenv-ws VectorSessionClient.step": vector_session,
            "openenv-ws VectorSessionClient send/recv": vector_session,
            f"{FLOOR}, step": True,
            f"{FLOOR}, send/recv": True,
        }
        assert set(rows) == set(expected)
        for path, available in expected.items():
            row = rows[path]
            assert row["envs"] == 2 and row["batch"] == (1 if "send/recv" in path else 2)
            if available:
                positive(row, "steps", "steps_per_s", "vs_atari", "vs_async")
                if envpool:
                    positive(row, "vs_envpool")
                # Every contender makes the setting's observations (as each lays them out).
                native = {"in-process AtariVectorEnv": "1x210x160x3", "EnvPool": "3x210x160"}
                rgb = "1x210x160x3" if FLOOR in path else native.get(path, "210x160x3")
                assert row["obs"] == (rgb if setting is SETTINGS[0] else "4x84x84"), row
            else:
                assert row["note"], row
        if not vector_session:
            assert rows["openenv-ws VectorSessionClient.step"]["note"] == (
                "unavailable: not built (openenv_ws.client.VectorSessionClient)"
            )
    # A line per setting and N: the vector session's best row, then the floor's.
    verdicts = [n for n in section["notes"] if "vector session at its best" in n]
    assert len(verdicts) == len(SETTINGS), verdicts
    for line in verdicts:
        assert "(target 0.9x)" in line and f"the floor at its best ({FLOOR}, " in line, line


def test_rollout_floor_server_that_cannot_start_is_named() -> None:
    # The floor's server exits at once on a game ale-py lacks: a clear error, not a wait.
    options = ale_options(SETTINGS[0].config)
    with (
        pytest.raises(RuntimeError, match="bare server exited with 1 before connecting"),
        bare_server("no_such_game", 2, 2, 0, 1, options),
    ):
        pass


def test_structured(tmp_path: Path) -> None:
    small = ("--placement", "shared", "--steps", "30", "--peer-steps", "20")
    section = bench(tmp_path, "structured", *small)
    rows = section["rows"]
    floor = "floor: bare TCP round trip + in-process step"
    assert [(r["env"], r["path"]) for r in rows] == [
        ("CartPole-v1", "in-process"),
        ("CartPole-v1", "openenv-ws sync"),
        ("CartPole-v1", "openenv-core WS"),
        ("CartPole-v1", floor),
        ("OpenEnv text (echo)", "in-process"),
        ("OpenEnv text (echo)", "openenv-ws sync"),
        ("OpenEnv text (echo)", "openenv-ws sync, --openenv-inline"),
        ("OpenEnv text (echo)", "OpenEnv WS client → openenv-ws inline"),
        ("OpenEnv text (echo)", "openenv-core WS"),
        ("OpenEnv text (echo)", floor),
    ]
    for row in rows:
        positive(row, "steps", "p50_us")
        if row["path"] != floor:
            positive(row, "p99_us")
        if row["path"] != "in-process":
            positive(row, "added_us", "openenv_x")
    # The floor is the in-process step plus a bare round trip, so above the in-process p50.
    for env in ("CartPole-v1", "OpenEnv text (echo)"):
        by_path = {r["path"]: r for r in rows if r["env"] == env}
        assert by_path[floor]["p50_us"] > by_path["in-process"]["p50_us"]
    verdicts = [n for n in section["notes"] if "(target 20x)" in n]
    assert [v.split(",")[0] for v in verdicts] == ["CartPole-v1", "OpenEnv text (echo)"]
