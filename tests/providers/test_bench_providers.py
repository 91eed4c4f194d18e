"""benchmarks/bench_providers.py runs every path for real and reports a number for each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def test_the_providers_benchmark_measures_every_path(
    atari_image: str, ray_tmpdir: str, tmp_path: Path
) -> None:
    out = tmp_path / "rows.json"
    args = ["--steps", "30", "--sessions", "1,2", "--image", atari_image, "--ray-cpus", "2"]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_providers.py"),
            *args,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    paths = ["in-process", "local server", "Docker port", "Ray actors"]
    assert [(r["path"], r["sessions"]) for r in rows] == [(p, n) for p in paths for n in (1, 2)]
    assert all(r["steps_per_s"] > 0 for r in rows), [r.get("note") for r in rows]
    assert "| Docker port | 2 |" in done.stdout and "| Ray actors | 1 |" in done.stdout
