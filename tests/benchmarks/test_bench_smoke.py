"""A short plain ``openenv-ws bench`` run (every default scenario), so the suite never rots.

No timing assertions: the run must finish, write its files, and every table
must hold the expected rows with sane positive numbers. A scenario whose part
of the runtime is missing from this build must say so (pending), and one whose
part is present must have run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.measure import Placement
from benchmarks.scenarios.latency import polling_pays
from benchmarks.servers import serve_supports, supports_pool
from benchmarks.suite import SCENARIOS

pytestmark = pytest.mark.slow

OBS_TYPES = ("rgb", "grayscale", "ram")
STEPS = 40
PEER_STEPS = 30


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    cmd = [
        sys.executable, "-m", "openenv_ws", "bench",
        "--out", str(out),
        "--steps", str(STEPS),
        "--rounds", "1",
        "--sessions", "1,2,4",
        "--open-count", "3",
        "--memory-sessions", "8",
        "--peer-steps", str(PEER_STEPS),
        "--peer-http-steps", "3",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"bench failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads((out / "report.json").read_text())
    return {
        "out": out,
        "stdout": done.stdout,
        "report": report,
        "sections": {s["name"]: s for s in report["sections"]},
        "markdown": (out / "report.md").read_text(),
        "samples": json.loads((out / "samples.json").read_text()),
    }


def _rows(run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    section = run["sections"][name]
    assert section["status"] == "ok", f"{name}: {section['status']}: {section['reason']}"
    keys = {c["key"] for c in section["columns"]}
    for row in section["rows"]:
        assert set(row) <= keys | {"mean_us"}, f"{name}: row keys {set(row) - keys} have no column"
    return list(section["rows"])


def _positive(row: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = row[key]
        assert isinstance(value, int | float) and value > 0, f"{key}={value!r} in {row}"


def test_every_default_scenario_is_reported_and_none_failed(run: dict[str, Any]) -> None:
    assert set(run["sections"]) == {name for name, entry in SCENARIOS.items() if entry.default}
    for name, section in run["sections"].items():
        missing = SCENARIOS[name].missing()
        if missing is None:
            assert section["status"] == "ok", f"{name}: {section['reason']}"
        else:
            assert section["status"] == "pending" and section["reason"] == missing
            assert missing in run["markdown"]


def test_report_files_exist(run: dict[str, Any]) -> None:
    out: Path = run["out"]
    for name in ("report.md", "report.json", "samples.json", "latency.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    has_curve = run["sections"]["throughput"]["status"] == "ok"
    assert (out / "throughput.png").exists() == has_curve
    assert run["report"]["machine"]["cores"] >= 1
    assert run["report"]["command"].startswith("openenv-ws bench --out ")


def test_latency_rows_per_obs_type_and_client(run: dict[str, Any]) -> None:
    rows = _rows(run, "latency")
    placements = {Placement.named(name).name for name in ("split", "shared")}
    paths = {(r["obs"], r["path"], r["placement"]) for r in rows}
    common = ("in-process", "openenv-ws sync", "openenv-ws sync-socket", "openenv-ws async")
    split = Placement.named("split")
    # Busy polling needs a core per side: only the split placement has it.
    polling = {split.name} if split.server is not None and split.server != split.client else set()
    assert paths == {
        (obs, path, where) for obs in OBS_TYPES for path in common for where in placements
    } | {(obs, "openenv-ws sync-poll", where) for obs in OBS_TYPES for where in polling}
    for row in rows:
        _positive(row, "p50_us", "p90_us", "p99_us", "max_us", "steps_per_s", "vs_inprocess")
        assert row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["max_us"]
    split = Placement.named("split").name
    for obs in OBS_TYPES:
        assert (
            len(run["samples"]["sections"]["latency"][obs][f"openenv-ws sync [{split}]"]) == STEPS
        )


def test_peer_rows_have_numbers_and_ratios(run: dict[str, Any]) -> None:
    rows = _rows(run, "openenv")
    placements = [Placement.named(name).name for name in ("split", "shared")]
    by_path = {(r["obs"], r["path"], r["placement"]): r for r in rows}
    assert {r["placement"] for r in rows} == set(placements)
    for where in placements:
        for obs in OBS_TYPES:
            paths = ["openenv-ws sync", "OpenEnv WS", "OpenEnv HTTP /step"]
            if serve_supports("--openenv-config"):
                paths.append("OpenEnv WS client → openenv-ws")
            polling = polling_pays(Placement.named("split")) and where == placements[0]
            for path in paths:
                row = by_path[(obs, path, where)]
                _positive(row, "steps", "p50_us", "steps_per_s", "ours_x", "vs_inprocess")
                # Busy polling is compared on split cores only.
                assert ("poll_x" in row) == polling, (path, where)
                if polling:
                    _positive(row, "poll_x")
            assert ((obs, "openenv-ws sync-poll", where) in by_path) == polling
            assert by_path[(obs, "OpenEnv HTTP /step", where)]["steps"] == 3
        _positive(by_path[("rgb", "OpenEnv WS, no PNG", where)], "steps_per_s", "ours_x")
    # One latency line per path in the plot's samples: the first placement's.
    assert len(run["samples"]["sections"]["openenv"]["rgb"]["OpenEnv WS"]) == PEER_STEPS
    assert "openenv-core 0.3" in run["markdown"]


def test_open_time_cold_and_warm(run: dict[str, Any]) -> None:
    rows = _rows(run, "open")
    for obs in OBS_TYPES:
        mine = {r["path"]: r for r in rows if r["obs"] == obs}
        _positive(mine["in-process: load + reset"], "open_p50_ms", "p50_ms", "max_ms")
        cold = mine["openenv-ws cold: connect + open + reset"]
        _positive(cold, "open_p50_ms", "p50_ms", "p90_ms", "vs_inprocess")
        assert cold["open_p50_ms"] <= cold["p50_ms"] <= cold["p90_ms"] <= cold["max_ms"]
        warm = mine["openenv-ws warm: connect + open + reset"]
        if supports_pool():
            _positive(warm, "open_p50_ms", "p50_ms", "vs_inprocess")
        else:
            assert warm["note"].startswith("pending"), warm


def test_memory_per_session(run: dict[str, Any]) -> None:
    rows = {r["path"]: r for r in _rows(run, "memory")}
    assert set(rows) == {"in-process", "openenv-ws server"}
    for row in rows.values():
        assert row["sessions"] == 8
        _positive(row, "before_mb", "after_mb", "per_session_mb")
        assert row["after_mb"] > row["before_mb"]


def test_throughput_curve_when_the_vector_client_exists(run: dict[str, Any]) -> None:
    if SCENARIOS["throughput"].missing() is not None:
        assert run["sections"]["throughput"]["status"] == "pending"
        return
    rows = _rows(run, "throughput")
    for mode in ("step", "send/recv"):
        counts = sorted(r["sessions"] for r in rows if r["obs"] == "rgb" and r["mode"] == mode)
        assert counts == [1, 2, 4], mode
    for row in rows:
        _positive(row, "steps", "steps_per_s", "vs_inprocess")
        assert "note" not in row, row
    curves = run["sections"]["throughput"]["curves"]
    assert any(label.startswith("in-process") for label in curves)


@pytest.mark.parametrize(("name", "where"), [("docker", "Docker port"), ("ray", "Ray actor")])
def test_provider_rows_have_numbers_or_say_why(run: dict[str, Any], name: str, where: str) -> None:
    if SCENARIOS[name].missing() is not None:
        assert run["sections"][name]["status"] == "pending"
        return
    rows = {(r["obs"], r["path"]): r for r in _rows(run, name)}
    for obs in OBS_TYPES:
        _positive(rows[(obs, "openenv-ws sync, local server")], "steps_per_s", "vs_inprocess")
        remote = rows[(obs, f"openenv-ws sync, {where}")]
        if remote.get("steps_per_s") is None:
            assert remote["note"].startswith("could not run: "), remote
        else:
            _positive(remote, "p50_us", "steps_per_s", "vs_local")


def test_markdown_has_a_table_per_scenario_that_ran(run: dict[str, Any]) -> None:
    for section in run["sections"].values():
        assert f"### {section['title']}" in run["markdown"]
        if section["status"] == "ok":
            header = "| " + " | ".join(c["header"] for c in section["columns"]) + " |"
            assert header in run["markdown"]
    assert "![latency](latency.png)" in run["markdown"]
