"""benchmarks/ppo_atari.py runs on openenv-ws (a smoke run of one short update)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import ppo_atari
from openenv_ws.server import ServerThread


def test_ppo_script_runs_on_openenv_ws(atari_server: ServerThread, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    argv = ["--backend", "openenv-ws", "--url", atari_server.url, "--num-envs", "2"]
    argv += ["--num-steps", "32", "--total-timesteps", "64", "--update-epochs", "1"]
    ppo_atari.main([*argv, "--out", str(out)])
    summary = json.loads(out.read_text())
    assert summary["backend"] == "openenv-ws" and summary["global_step"] == 64
    assert summary["sps"] > 0
