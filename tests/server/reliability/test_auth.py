"""Bearer-token authentication on the WebSocket handshake, on ``open`` and on every HTTP route."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys

import httpx
import pytest

from openenv_ws import AuthError
from openenv_ws.client import AsyncEnvClient, EnvClient
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.errors import SessionClosed
from openenv_ws.protocol import Error, Open, Opened, decode_server_frame, encode
from openenv_ws.server.transport.auth import TOKEN_ENV, exposure_warning, token_matches

from .conftest import UNIT, serve, wait_until

TOKEN = "tok-3f9a1c-very-secret"
WRONG = "tok-3f9a1c-very-secreT"


def test_the_right_token_opens_a_session() -> None:
    with serve(token=TOKEN) as server, EnvClient(server.url, token=TOKEN) as env:
        assert env.reset(seed=1).info == {"step": 0}


def test_the_token_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with serve(token=TOKEN) as server, EnvClient(server.url) as env:
        env.reset()


async def test_async_client_with_and_without_the_token() -> None:
    with serve(token=TOKEN) as server:
        async with AsyncEnvClient(server.url, token=TOKEN) as env:
            await env.reset()
        with pytest.raises(AuthError, match="401"):
            await AsyncEnvClient.connect(server.url, token=WRONG)
        with pytest.raises(AuthError, match="requires a bearer token"):
            await AsyncEnvClient.connect(server.url)


def test_a_wrong_token_is_refused_at_the_handshake_with_401() -> None:
    with serve(token=TOKEN) as server:
        with pytest.raises(AuthError, match="HTTP 401"):
            EnvClient(server.url, token=WRONG)
        for header in (f"Bearer {WRONG}", "Basic dXNlcjpwYXNz", TOKEN, "Bearer"):
            with pytest.raises(AuthError, match="HTTP 401"):
                BlockingWebSocket(server.url, headers={"Authorization": header})
        response = httpx.get(
            f"{server.http_url}/ws",
            headers={
                "Authorization": f"Bearer {WRONG}",
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            },
        )
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "bearer token" in response.json()["message"]


def test_a_missing_token_is_refused_at_open_with_1008() -> None:
    with serve(token=TOKEN) as server:
        with pytest.raises(AuthError, match="requires a bearer token"):
            EnvClient(server.url)
        ws = BlockingWebSocket(server.url)  # no header: the open frame must carry the token
        ws.send(encode(Open(id=1, token=WRONG)))
        reply = ws.recv(decode_server_frame, timeout=5 * UNIT)
        assert isinstance(reply, Error) and reply.code == "auth" and reply.fatal
        with pytest.raises(SessionClosed) as info:
            ws.recv(decode_server_frame, timeout=5 * UNIT)
        assert info.value.close_code == 1008
        supervisor = server.server.config.app.state.supervisor
        assert supervisor.metrics.errors["auth"] == 2


def test_the_token_in_open_works_without_a_header() -> None:
    """Browsers cannot set headers on a WebSocket; the open frame carries the token."""
    with serve(token=TOKEN) as server:
        ws = BlockingWebSocket(server.url)
        ws.send(encode(Open(id=1, token=TOKEN)))
        assert isinstance(ws.recv(decode_server_frame, timeout=5 * UNIT), Opened)
        ws.close()


ROUTES = ["/metrics", "/v1/sessions", "/state", "/no/such/route"]


@pytest.mark.parametrize("path", ROUTES)
def test_every_http_route_needs_the_token(path: str) -> None:
    with serve(token=TOKEN) as server:
        base = server.http_url
        for headers in ({}, {"Authorization": f"Bearer {WRONG}"}, {"Authorization": TOKEN}):
            response = httpx.get(f"{base}{path}", headers=headers)
            assert response.status_code == 401, (path, headers)
            assert response.json()["error"] == "auth"
        right = httpx.get(f"{base}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code != 401


def test_health_is_public_and_metrics_with_the_token() -> None:
    with serve(token=TOKEN) as server:
        assert httpx.get(f"{server.http_url}/health").json()["status"] == "ok"
        metrics = httpx.get(
            f"{server.http_url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert metrics.status_code == 200 and "openenv_ws_sessions" in metrics.text


@pytest.mark.parametrize("path", ["/", "/web/", "/web/app.js", "/web/info"])
def test_the_web_page_loads_without_a_header_but_its_session_needs_the_token(path: str) -> None:
    """A browser cannot send the header when loading a page; the page's session sends it in open."""
    with serve(token=TOKEN, web=True) as server:
        page = httpx.get(f"{server.http_url}{path}", follow_redirects=True)
        assert page.status_code == 200, path
        ws = BlockingWebSocket(server.url)
        ws.send(encode(Open(id=1)))
        refused = ws.recv(decode_server_frame, timeout=5 * UNIT)
        assert isinstance(refused, Error) and refused.code == "auth"
        ws.close()


def test_token_comparison() -> None:
    assert token_matches(TOKEN, TOKEN) and token_matches(TOKEN, TOKEN.encode())
    assert not token_matches(TOKEN, WRONG) and not token_matches(TOKEN, None)
    assert not token_matches(TOKEN, "") and not token_matches(TOKEN, TOKEN + "x")
    assert not token_matches(TOKEN, "\udcff")  # not even valid UTF-8


@pytest.mark.parametrize(
    ("host", "token", "warns"),
    [
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
        ("0.0.0.0", None, True),
        ("192.168.1.10", None, True),
        ("example.org", None, True),
        ("0.0.0.0", TOKEN, False),
    ],
)
def test_a_public_bind_without_a_token_warns(host: str, token: str | None, warns: bool) -> None:
    warning = exposure_warning(host, token)
    assert (warning is not None) == warns
    if warning:
        assert host in warning and TOKEN_ENV in warning


def test_tokens_never_reach_the_logs(caplog: pytest.LogCaptureFixture) -> None:
    """A real server subprocess at debug level, and this process's loggers, see right and
    wrong tokens in headers and open frames; neither token shows up in any log line."""
    caplog.set_level(logging.DEBUG)
    env = {**os.environ, TOKEN_ENV: TOKEN, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0"]
    proc = subprocess.Popen(
        [*cmd, "--log-level", "debug"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("ws://127.0.0.1:"), line
        http = url.replace("ws://", "http://").removesuffix("/ws")
        wait_until(lambda: _up(http), 30 * UNIT, what="server up")
        with EnvClient(url, token=TOKEN) as client:
            client.reset()
        for bad in (WRONG, None):
            with pytest.raises(AuthError):
                EnvClient(url, token=bad or "")
        ws = BlockingWebSocket(url)
        ws.send(encode(Open(id=1, token=WRONG)))
        ws.recv(decode_server_frame, timeout=5 * UNIT)
        ws.close()
        httpx.get(f"{http}/metrics", headers={"Authorization": f"Bearer {WRONG}"})
        httpx.get(f"{http}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        asyncio.run(_async_session(url))
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30 * UNIT)
    assert proc.returncode == 0
    assert "DEBUG" in output or "INFO" in output  # the server did log at debug level
    logged = output + caplog.text
    assert TOKEN not in logged and WRONG not in logged
    assert TOKEN[4:12] not in logged  # not even a piece of it


async def _async_session(url: str) -> None:
    async with AsyncEnvClient(url, token=TOKEN) as client:  # websockets logs its handshake
        await client.reset()
    with pytest.raises(AuthError):
        await AsyncEnvClient.connect(url, token=WRONG)


def _up(http: str) -> bool:
    try:
        return httpx.get(f"{http}/health").status_code == 200
    except httpx.HTTPError:
        return False


def test_handshake_header_lines_are_blanked(caplog: pytest.LogCaptureFixture) -> None:
    """What websockets writes at debug level for a handshake, through the server's filters."""
    from openenv_ws._logsafe import LOGGERS, redact_credentials

    redact_credentials()
    for name in LOGGERS:
        # Straight to caplog's handler: uvicorn's logging config stops propagation.
        logger = logging.getLogger(name)
        logger.addHandler(caplog.handler)
        level, logger.level = logger.level, logging.DEBUG
        try:
            logger.debug("> Authorization: Bearer %s", TOKEN)
            logger.debug("< Cookie: session=%s", WRONG)
        finally:
            logger.removeHandler(caplog.handler)
            logger.setLevel(level)
    for blanked in ("> Authorization: <redacted>", "< Cookie: <redacted>"):
        seen = {r.name for r in caplog.records if r.getMessage() == blanked}
        assert seen == set(LOGGERS), blanked
    assert TOKEN not in caplog.text and WRONG not in caplog.text
