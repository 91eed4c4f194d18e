"""Browser origins: a page of another site cannot open sessions on a server.

Browsers send an ``Origin`` header with every WebSocket handshake and every
cross-site POST, and let any page reach any address, 127.0.0.1 included. The
server accepts its own page (same origin), the origins it was told to allow,
and clients that are not browsers (they send no Origin); on plain HTTP, reads
(GET, HEAD, OPTIONS) stay open to all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from openenv_ws.client import EnvClient
from openenv_ws.protocol import Open, Opened, decode_server_frame, encode
from openenv_ws.server.routes.fallback import SESSIONS_PATH

from ..._rawwire import RawWS
from .conftest import UNIT, health, serve


def _opens(url: str, origin: str | None) -> bool:
    """True if a handshake with `origin` is accepted and a session opens on it."""
    headers = {} if origin is None else {"Origin": origin}
    try:
        ws = RawWS.to(url, timeout=5 * UNIT, headers=headers)
    except ConnectionError as exc:
        assert "403" in str(exc), exc
        return False
    with ws:
        ws.send(encode(Open(id=1)))
        return isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)


def test_only_same_origin_pages_and_non_browsers_open_sessions() -> None:
    with serve() as server:
        own = f"http://127.0.0.1:{server.port}"
        assert _opens(server.url, None)
        assert _opens(server.url, own)
        assert _opens(server.url, own + "/")
        assert not _opens(server.url, "https://evil.example")
        assert not _opens(server.url, f"http://127.0.0.1:{server.port + 1}")
        assert not _opens(server.url, "null")  # sandboxed frames and file:// pages
        with EnvClient(server.url) as env:  # the clients send no Origin
            env.reset(seed=0)


def test_allowed_origins_are_let_in() -> None:
    with serve(allowed_origins=("https://lab.example/", "http://localhost:5173")) as server:
        assert _opens(server.url, "https://lab.example")
        assert _opens(server.url, "HTTP://LOCALHOST:5173")
        assert not _opens(server.url, "https://other.example")
    with serve(allowed_origins=("*",)) as server:
        assert _opens(server.url, "https://anything.example")


@pytest.mark.parametrize("flag", [[], ["--allow-origin", "https://lab.example"]])
def test_serve_flag(flag: list[str]) -> None:
    from openenv_ws.providers import LocalServerProvider

    with LocalServerProvider(args=["--env", "fake", "--pool-size", "0", *flag]) as server:
        assert _opens(server.url, "https://lab.example") == bool(flag)
        assert not _opens(server.url, "https://evil.example")
    out = subprocess.run(
        [sys.executable, "-m", "openenv_ws.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--allow-origin" in out


def _http(
    url: str, method: str, origin: str | None, body: bytes | None = None
) -> tuple[int, dict[str, object]]:
    """Status and JSON body of a request as a page of `origin` would send it (text/plain)."""
    headers = {"Content-Type": "text/plain"}  # a "simple" request: no CORS preflight
    if origin is not None:
        headers["Origin"] = origin
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5 * UNIT) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_http_routes_refuse_other_sites_pages() -> None:
    with serve() as server:
        base = server.http_url
        own = f"http://127.0.0.1:{server.port}"
        status, body = _http(base + SESSIONS_PATH, "POST", "https://evil.example", b"{}")
        assert status == 403
        assert body["error"] == "origin" and "https://evil.example" in str(body["message"])
        assert health(base)["http_sessions"] == 0  # nothing was opened
        # OpenEnv's routes too: its POST /reset would open a session.
        status, body = _http(base + "/reset", "POST", "null", b"{}")
        assert (status, body["error"]) == (403, "origin")
        assert health(base)["http_sessions"] == 0
        # The server's own page and non-browser clients are served.
        status, opened = _http(base + SESSIONS_PATH, "POST", own, b"{}")
        assert status == 201, opened
        session = f"{base}{SESSIONS_PATH}/{opened['session_id']}"
        status, _ = _http(base + SESSIONS_PATH, "POST", None, b"{}")
        assert status == 201
        assert health(base)["http_sessions"] == 2
        # Another site can neither step nor close a session whose id it learnt...
        status, body = _http(session + "/reset", "POST", "https://evil.example", b"{}")
        assert (status, body["error"]) == (403, "origin")
        status, body = _http(session, "DELETE", f"http://127.0.0.1:{server.port + 1}")
        assert (status, body["error"]) == (403, "origin")
        assert health(base)["http_sessions"] == 2
        # ... while reads stay open (its script cannot see the answer without CORS).
        status, state = _http(session + "/state", "GET", "https://evil.example")
        assert status == 200 and state["op"] == "state"
        status, _ = _http(session, "DELETE", own)
        assert status == 200
        assert health(base, headers={"Origin": "https://evil.example"})["http_sessions"] == 1


def test_http_allowed_origins() -> None:
    with serve(allowed_origins=("https://lab.example",)) as server:
        url = server.http_url + SESSIONS_PATH
        assert _http(url, "POST", "https://lab.example/", b"{}")[0] == 201
        assert _http(url, "POST", "https://other.example", b"{}")[0] == 403
