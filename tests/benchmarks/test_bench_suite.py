"""The suite's plumbing without measuring: registry, options, placement, report rendering."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.measure import Placement, latency_row
from benchmarks.report import line_looks, write_run
from benchmarks.runner import ORDER, build_parser, options_from
from benchmarks.suite import SCENARIOS, Column, Section, has_attr, scenario


def test_every_planned_scenario_is_registered() -> None:
    assert set(ORDER) <= set(SCENARIOS)


def test_a_scenario_name_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="'latency' is registered twice"):
        scenario("latency", "again")(lambda ctx: Section("latency", "again"))


def test_requires_check_names_what_is_missing() -> None:
    assert has_attr("openenv_ws.client", "EnvClient", "the sync client")() is None
    missing = has_attr("openenv_ws.client", "NoSuchClient", "a client that does not exist")()
    assert missing == (
        "a client that does not exist (openenv_ws.client.NoSuchClient) is not in this build"
    )
    assert has_attr("no_such_module_here", "x", "nothing")() is not None


def test_options_parse_lists_and_refuse_unknown_scenarios() -> None:
    args = build_parser().parse_args(
        ["--scenarios", "latency, memory", "--sessions", "1,8", "--obs-types", "ram"]
    )
    options = options_from(args)
    assert options.scenarios == ("latency", "memory")
    assert options.sessions == (1, 8)
    assert options.obs_types == ("ram",)
    default = options_from(build_parser().parse_args([])).scenarios
    assert default == tuple(n for n in ORDER if n in default)
    assert set(default) == {name for name, entry in SCENARIOS.items() if entry.default}
    everything = options_from(build_parser().parse_args(["--scenarios", "all"])).scenarios
    assert set(everything) == set(SCENARIOS) and set(default) < set(everything)
    with pytest.raises(SystemExit, match="unknown scenario"):
        options_from(build_parser().parse_args(["--scenarios", "latency,warp"]))


def test_placements() -> None:
    split = Placement.named("split")
    if split.server is not None:
        assert split.server.isdisjoint(split.client or set())
    shared = Placement.named("shared")
    assert shared.server == shared.client
    assert Placement.named("any").server is None
    with pytest.raises(ValueError, match="unknown placement 'moon'"):
        Placement.named("moon")


def test_every_latency_line_looks_different() -> None:
    import matplotlib

    matplotlib.use("Agg")
    palette = matplotlib.colormaps["tab10"]
    labels = [f"transport {i}" for i in range(40)]
    looks = line_looks(labels, palette)
    assert len(set(looks.values())) == 40  # a colour repeats only with another line style
    assert looks["transport 0"] == (palette(0), "-") and looks["transport 10"][1] == "--"


def test_latency_row_statistics() -> None:
    import numpy as np

    row = latency_row(np.array([0.001, 0.002, 0.003, 0.004]))
    assert row["steps_per_s"] == pytest.approx(400.0)
    assert row["max_us"] == pytest.approx(4000.0)
    assert row["p50_us"] == pytest.approx(2500.0)


def test_report_renders_pending_and_ok_sections(tmp_path: Path) -> None:
    ok = Section("demo", "Demo table", [Column("x", "x"), Column("v", "value µs", ".1f")])
    ok.add(x="a|b", v=1.26)
    ok.sample("rgb", "path one", [0.001, 0.002])
    pending = Section("later", "Later", status="pending", reason="not built yet")
    run = {
        "started": "2024-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "command": "openenv-ws bench",
        "machine": {
            "cpu": "cpu",
            "cores": 2,
            "memory_gb": 1.0,
            "os": "Linux",
            "python": "3.11",
            "versions": {"openenv-ws": "0"},
        },
    }
    files = write_run(tmp_path, run, [ok, pending], plots=True)
    markdown = (tmp_path / "report.md").read_text()
    assert "| x | value µs |" in markdown
    assert "| a\\|b | 1.3 |" in markdown
    assert "*pending: not built yet*" in markdown
    data = json.loads((tmp_path / "report.json").read_text())
    assert [s["status"] for s in data["sections"]] == ["ok", "pending"]
    assert data["plots"] == ["latency.png"]
    samples = json.loads((tmp_path / "samples.json").read_text())
    assert samples["sections"]["demo"]["rgb"]["path one"] == [1000.0, 2000.0]
    assert tmp_path / "latency.png" in files and not (tmp_path / "throughput.png").exists()


def test_cli_lists_scenarios_with_their_state() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "openenv_ws", "bench", "--list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for name in ORDER:
        assert f"\n{name} " in "\n" + done.stdout
    assert "[ready; default]" in done.stdout
    assert "[ready; when named]" in done.stdout


def test_cli_refuses_unknown_options_of_other_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "openenv_ws", "games", "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "unrecognized arguments: --steps 3" in done.stderr
