"""OpenEnv's HTTP routes serve a session the way the HTTP fallback and WebSocket do: an
environment that is not inline runs on the session's worker thread under the server's
step_timeout, so one slow call ends its session instead of stalling the server."""

from __future__ import annotations

from starlette.testclient import TestClient

from openenv_ws.server import ServerLimits, create_app
from openenv_ws.testing import fake_factory
from tests.conftest import UNIT


def test_a_step_past_the_deadline_ends_the_openenv_session_with_step_timeout() -> None:
    limits = ServerLimits(step_timeout=0.05 * UNIT)
    app = create_app(
        fake_factory,
        web=False,
        limits=limits,
        openenv_config={"step_sleep": 0.5 * UNIT},  # not inline: served on a worker thread
        allowed_hosts=["testserver"],
    )
    with TestClient(app) as client:
        assert client.post("/reset", json={}).status_code == 200
        r = client.post("/step", json={"action": {"action_id": 0}})
        assert r.status_code == 504 and r.json()["protocol_code"] == "step_timeout"
        r = client.post("/step", json={"action": {"action_id": 0}})
        assert r.status_code == 404  # the session was closed
