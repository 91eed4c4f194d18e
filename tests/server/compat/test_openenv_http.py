"""OpenEnv's HTTP routes: stateful per client (cookie), seeds honoured, expiry; OpenEnv 0.1's client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.server.routes.openenv_compat import COOKIE
from openenv_ws.testing import fake_factory
from tests.conftest import UNIT
from tests.server.compat.conftest import OPENENV_01

HERE = Path(__file__).resolve().parent


@pytest.mark.registry
def test_openenv_01_http_client_plays_one_coherent_episode(
    pong_server: ServerThread, openenv_core_01: Path
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(openenv_core_01), str(HERE.parents[2])]),
    }
    done = subprocess.run(
        [sys.executable, str(HERE / "openenv01_episode.py"), pong_server.http_url, "500"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120 * UNIT,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert run["client_module"].startswith(str(openenv_core_01)), f"not {OPENENV_01}"
    steps = run["steps"]
    # The server's OpenEnv config caps episodes at 60 steps: reset + 60 steps, then done.
    assert len(steps) == 61 and steps[-1]["done"] and not any(s["done"] for s in steps[:-1])
    frames = [s["episode_frame_number"] for s in steps]
    assert frames == [4 * i for i in range(61)], "one environment, advancing across calls"
    assert all(
        b - a == 4
        for a, b in zip(
            [s["frame_number"] for s in steps], [s["frame_number"] for s in steps[1:]], strict=False
        )
    )
    assert all(
        s["screen_len"] == 210 * 160 * 3 and s["screen_shape"] == [210, 160, 3] for s in steps
    )
    states = run["states"]
    assert [s["step_count"] for s in states] == [0, 20, 40, 60, 60]
    assert len({s["episode_id"] for s in states}) == 1
    assert states[0]["game_name"] == "pong"


def test_each_client_keeps_its_own_environment(fake_compat_server: ServerThread) -> None:
    base = fake_compat_server.http_url
    with requests.Session() as a, requests.Session() as b:
        ra = a.post(f"{base}/reset", json={"seed": 1})
        rb = b.post(f"{base}/reset", json={"seed": 2})
        assert ra.status_code == rb.status_code == 200
        assert a.cookies[COOKIE] != b.cookies[COOKIE]
        a.post(f"{base}/step", json={"action": {"action_id": 1}, "timeout_s": 15})
        a.post(f"{base}/step", json={"action": {"action_id": 2}, "timeout_s": 15})
        assert a.get(f"{base}/state").json()["step_count"] == 2
        assert b.get(f"{base}/state").json()["step_count"] == 0
        assert (a.get(f"{base}/state").json()["seed"], b.get(f"{base}/state").json()["seed"]) == (
            1,
            2,
        )
        last = a.post(f"{base}/step", json={"action": {"action_id": 3}}).json()
        assert last["done"] and last["observation"]["terminated"] and last["reward"] == 3.0
        r = a.post(f"{base}/step", json={"action": {"action_id": 0}})
        assert r.status_code == 409 and r.json()["protocol_code"] == "episode_over"
        assert r.json()["code"] == "EXECUTION_ERROR" and "reset" in r.json()["detail"]
        # A reset on the same client reuses its environment (same cookie, same session).
        cookie = a.cookies[COOKIE]
        assert a.post(f"{base}/reset", json={}).status_code == 200
        assert a.cookies[COOKIE] == cookie
        assert requests.get(f"{base}/health").json()["http_sessions"] == 2


def test_seeds_are_honoured(fake_compat_server: ServerThread) -> None:
    base = fake_compat_server.http_url
    with requests.Session() as a, requests.Session() as b:
        first = a.post(f"{base}/reset", json={"seed": 5}).json()["observation"]["screen"]
        again = b.post(f"{base}/reset", json={"seed": 5}).json()["observation"]["screen"]
        other = a.post(f"{base}/reset", json={"seed": 6}).json()["observation"]["screen"]
    assert first == again and first != other


def test_step_without_a_session_says_to_reset_first(fake_compat_server: ServerThread) -> None:
    base = fake_compat_server.http_url
    r = requests.post(f"{base}/step", json={"action": {"action_id": 0}})
    assert r.status_code == 409 and "POST /reset first" in r.json()["detail"]
    r = requests.post(f"{base}/step", json={"action": {"action_id": 0}}, cookies={COOKIE: "gone"})
    assert r.status_code == 404 and r.json()["protocol_code"] == "not_open"
    assert requests.get(f"{base}/state").json() == {"episode_id": None, "step_count": 0}
    with requests.Session() as s:
        s.post(f"{base}/reset")
        assert s.post(f"{base}/step", json={"nothing": 1}).status_code == 400
        r = s.post(f"{base}/step", json={"action": {"action_id": 9}})
        assert r.status_code == 422 and r.json()["code"] == "VALIDATION_ERROR"
        r = s.post(f"{base}/reset", data=b"{oops", headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_JSON"


def test_capacity_over_http_is_429(fake_compat_server: ServerThread) -> None:
    base = fake_compat_server.http_url
    sessions = [requests.Session() for _ in range(3)]
    try:
        assert [s.post(f"{base}/reset").status_code for s in sessions] == [200, 200, 429]
        assert sessions[2].post(f"{base}/reset").json()["code"] == "CAPACITY_REACHED"
    finally:
        for s in sessions:
            s.close()


def test_schema_metadata_and_health(pong_server: ServerThread) -> None:
    base = pong_server.http_url
    schema = requests.get(f"{base}/schema").json()
    assert schema["action"]["properties"]["action_id"]["maximum"] == 5
    assert schema["observation"]["properties"]["screen_shape"]["default"] == [210, 160, 3]
    assert "step_count" in schema["state"]["properties"]
    meta = requests.get(f"{base}/metadata").json()
    assert meta["name"] == "atari:pong" and set(meta) >= {"name", "description", "version"}
    health = requests.get(f"{base}/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_abandoned_openenv_sessions_expire() -> None:
    limits = ServerLimits(http_session_ttl=0.2 * UNIT)
    app = create_app(fake_factory, limits=limits)
    with ServerThread(app) as server, requests.Session() as s:
        base = server.http_url
        s.post(f"{base}/reset")
        old = s.cookies[COOKIE]
        deadline = time.monotonic() + 20 * UNIT
        while (
            requests.get(f"{base}/health").json()["http_sessions"] and time.monotonic() < deadline
        ):
            time.sleep(0.05 * UNIT)
        r = s.post(f"{base}/step", json={"action": {"action_id": 0}})
        assert r.status_code == 404 and r.json()["protocol_code"] == "idle_timeout"
        assert s.post(f"{base}/reset").status_code == 200
        assert s.cookies[COOKIE] != old  # a new session, a new cookie


def test_serve_takes_the_openenv_config_and_the_http_ttl_from_the_command_line() -> None:
    from openenv_ws.providers import LocalServerProvider

    args = ["--env", "fake", "--openenv-config", '{"episode_length": 2, "obs_shape": [3]}']
    with LocalServerProvider(args=[*args, "--http-session-ttl", "60"]) as server:
        base = server.http_url
        with requests.Session() as s:
            first = s.post(f"{base}/reset", json={"seed": 1}).json()
            assert first["observation"]["screen_shape"] == [3]
            s.post(f"{base}/step", json={"action": {"action_id": 1}})
            assert s.post(f"{base}/step", json={"action": {"action_id": 1}}).json()["done"]
    bad = subprocess.run(
        [sys.executable, "-m", "openenv_ws", "serve", "--openenv-config", "[1]"],
        capture_output=True,
        text=True,
        timeout=60 * UNIT,
    )
    assert bad.returncode != 0 and "--openenv-config must be a JSON object" in bad.stderr
