"""Browser origins: a page of another site cannot open sessions on a server.

Browsers send an ``Origin`` header with every WebSocket handshake and let any
page connect to any address, 127.0.0.1 included. The server accepts its own
page (same origin), the origins it was told to allow, and clients that are
not browsers (they send no Origin).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from openenv_ws.client import EnvClient
from openenv_ws.protocol import Open, Opened, decode_server_frame, encode

from .conftest import UNIT, serve
from .rawws import RawWS


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
