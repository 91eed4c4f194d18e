"""A value of the environment that neither protocol v1 nor JSON can carry is an error reply
on every transport (the session and its replies are frame objects until they are written)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from openenv_ws.environment import EnvResult
from openenv_ws.protocol import Error, Open, Reset, Step, decode_server_frame, encode
from openenv_ws.server import create_app
from openenv_ws.testing import FakeEnvironment


class Odd:
    pass


class OddInfo(FakeEnvironment):
    """Steps carry an object in their info."""

    def step(self, action: Any, **kwargs: Any) -> EnvResult:
        result = super().step(action, **kwargs)
        result.info["odd"] = Odd()
        return result


def factory(config: dict[str, Any]) -> OddInfo:
    return OddInfo(config)


def client() -> TestClient:
    return TestClient(create_app(factory, web=False, allowed_hosts=["testserver"]))


def test_websocket_protocol_v1() -> None:
    with client() as c, c.websocket_connect("/ws") as ws:
        for frame in (Open(id=1), Reset(id=2), Step(id=3, action=0)):
            ws.send_bytes(encode(frame))
            reply = decode_server_frame(ws.receive_bytes())
        assert isinstance(reply, Error) and reply.id == 3 and "Odd" in reply.message


def test_http_fallback() -> None:
    with client() as c:
        path = c.post("/v1/sessions", json={}).headers["location"]
        c.post(path + "/reset", json={})
        r = c.post(path + "/step", json={"id": 3, "action": 0})
        assert r.status_code >= 400 and "Odd" in r.json()["message"]
        assert c.get("/health").json()["http_sessions"] == 0  # a fatal error ends the session


def test_openenv_http_routes() -> None:
    with client() as c:
        c.post("/reset", json={})
        r = c.post("/step", json={"action": {"action_id": 0}})
        assert r.status_code >= 400 and "Odd" in r.json()["message"]


def test_openenv_websocket_dialect() -> None:
    with client() as c, c.websocket_connect("/ws") as ws:
        ws.send_text('{"type": "reset", "data": {}}')
        assert '"observation"' in ws.receive_text()
        ws.send_text('{"type": "step", "data": {"action_id": 0}}')
        reply = ws.receive_text()
        assert '"error"' in reply and "Odd" in reply
