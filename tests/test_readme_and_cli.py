"""The README's two commands, the CI entry point and the command line stay true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import openenv_ws
from openenv_ws.palette import NATIVE
from openenv_ws.providers import LocalServerProvider

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.+?)\n```", text, flags=re.S)[:2]


def test_readme_opens_with_the_run_and_test_commands() -> None:
    run, test = readme_commands()
    assert "pip install -e ." in run and run.endswith("openenv-ws demo")
    assert "pip install -e '.[test]'" in test and test.endswith("pytest")
    assert run.startswith("python3.11 -m venv") and test.startswith("python3.11 -m venv")


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, test = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci, "'.ci/run' must run the README's test command, unchanged"


def test_package_exports_exist() -> None:
    for name in openenv_ws.__all__:
        assert hasattr(openenv_ws, name), name


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openenv_ws", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_plays_over_a_real_server() -> None:
    done = run_cli("demo", "--max-steps", "150")
    assert done.returncode == 0, done.stderr
    assert re.search(r"150 steps, score \d+ \(agent\) - \d+ \(cpu\), truncated", done.stdout)
    assert re.search(r"steps/s; step latency p50 \d+ us, p99 \d+ us", done.stdout)
    frames = re.search(r"\(RGB 210x160x3 frames (as colour codes )?(through|over) ", done.stdout)
    assert frames is not None and (frames.group(1) is not None) is NATIVE, done.stdout


def test_games_lists_the_bundled_roms() -> None:
    listing = run_cli("games").stdout.split()
    assert {"pong", "breakout", "space_invaders"} <= set(listing) and len(listing) > 90


def test_serve_subprocess_starts_and_stops_cleanly() -> None:
    provider = LocalServerProvider(args=["--env", "fake"]).start()
    process = provider.process
    assert process is not None
    health = provider.health()
    assert health is not None and health["status"] == "ok" and health["sessions"] == 0
    provider.stop()
    assert process.poll() is not None  # no orphan left behind
    provider.stop()  # idempotent


def test_serve_rejects_an_unknown_env() -> None:
    done = run_cli("serve", "--env", "nosuchmodule:factory", "--port", "0", timeout=60)
    assert done.returncode != 0 and "cannot be loaded" in done.stderr


def test_readme_command_lines_use_options_that_exist() -> None:
    """Every ``openenv-ws serve|bench --flag`` the README shows is in that command's --help."""
    text = (ROOT / "README.md").read_text()
    shown: dict[str, set[str]] = {"serve": set(), "bench": set()}
    for command, rest in re.findall(
        r"openenv-ws (serve|bench)((?: +--?[\w-]+(?: +[^\s`-][^\s`]*)?)*)", text
    ):
        shown[command] |= set(re.findall(r"--[\w-]+", rest))
    table = text[text.index("## Serving: the important flags") :]
    table = table[: table.index("\n\n", table.index("| flag |"))]
    shown["serve"] |= set(re.findall(r"`(--[\w-]+)`", table))
    assert {"--port", "--workers", "--token", "--busy-poll"} <= shown["serve"]
    assert "--out" in shown["bench"]
    for command, flags in shown.items():
        done = run_cli(command, "--help")
        assert done.returncode == 0, done.stderr
        missing = sorted(f for f in flags if f not in done.stdout)
        assert not missing, f"openenv-ws {command} has no {missing}"
