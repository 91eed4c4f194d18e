"""The docker and ray scenarios of ``openenv-ws bench`` run their paths for real and report numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_the_provider_scenarios_measure_every_path(
    atari_image: str, ray_tmpdir: str, tmp_path: Path
) -> None:
    cmd = [
        sys.executable, "-m", "openenv_ws", "bench",
        "--scenarios", "docker,ray",
        "--steps", "30",
        "--obs-types", "ram",
        "--placement", "any",
        "--no-plots",
        "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "OPENENV_WS_BENCH_IMAGE": atari_image},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sections = {
        s["name"]: s for s in json.loads((tmp_path / "report.json").read_text())["sections"]
    }
    for name, where in (("docker", "Docker port"), ("ray", "Ray actor")):
        assert sections[name]["status"] == "ok", sections[name]["reason"]
        rows = {r["path"]: r for r in sections[name]["rows"]}
        assert set(rows) == {
            "in-process",
            "openenv-ws sync, local server",
            f"openenv-ws sync, {where}",
        }
        assert all(r.get("steps_per_s", 0) > 0 for r in rows.values()), rows
