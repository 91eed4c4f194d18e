"""The page's routes, its switch, and that everything it needs ships in the package."""

from __future__ import annotations

import fnmatch
import re
import tomllib

import httpx
import pytest
from starlette.testclient import TestClient

from atari import atari_factory, games
from openenv_ws.cli import _parser
from openenv_ws.providers import LocalServerProvider
from openenv_ws.server import create_app
from openenv_ws.testing import fake_factory
from openenv_ws.web import STATIC_DIR, env_choices

from ..conftest import UNIT
from ..wire.protocol.vectorlib import ROOT

STATIC_FILES = sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file())


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(atari_factory), base_url="http://localhost")


def test_home_redirects_to_the_page(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == "/web/"
    page = client.get("/web")  # no trailing slash: redirected too
    assert page.status_code == 200
    assert str(page.url).endswith("/web/")
    assert '<canvas id="screen"' in page.text
    assert page.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize(
    "name",
    ["app.js", "msgpack.js", "protocol.js", "screen.js", "session.js", "wire.js", "style.css"],
)
def test_static_files_are_served_with_their_type(client: TestClient, name: str) -> None:
    r = client.get(f"/web/{name}")
    assert r.status_code == 200
    want = "text/css" if name.endswith(".css") else "text/javascript"
    assert r.headers["content-type"].startswith(want)
    assert r.content == (STATIC_DIR / name).read_bytes()


def test_info_lists_the_atari_games(client: TestClient) -> None:
    info = client.get("/web/info").json()
    assert info["protocol"] == 1
    assert info["ws_path"] == "/ws"
    assert info["env"] == "atari"
    assert info["games"] == games()
    assert info["obs_types"] == ["rgb", "grayscale", "ram"]
    assert info["defaults"] == {"game": "pong", "obs_type": "rgb"}


def test_info_of_another_environment_offers_no_games() -> None:
    assert env_choices(fake_factory) == {"env": None, "games": [], "obs_types": [], "defaults": {}}
    info = TestClient(create_app(fake_factory), base_url="http://localhost").get("/web/info").json()
    assert info["games"] == [] and info["ws_path"] == "/ws"


def test_web_false_serves_no_page() -> None:
    client = TestClient(create_app(fake_factory, web=False), base_url="http://localhost")
    for path in ("/", "/web/", "/web/app.js", "/web/info"):
        assert client.get(path).status_code == 404, path
    assert client.get("/health").status_code == 200


def test_serve_no_web_flag() -> None:
    assert _parser().parse_args(["serve"]).web is True
    assert _parser().parse_args(["serve", "--no-web"]).web is False


def test_page_references_only_its_own_files() -> None:
    """No CDN: every src/href/import of the page names a file shipped beside it."""
    refs: set[str] = set()
    for name in STATIC_FILES:
        text = (STATIC_DIR / name).read_text(encoding="utf-8")
        assert not re.search(r"https?://", text), f"{name} names a remote URL"
        refs |= set(re.findall(r'(?:src|href)="([^"]+)"', text))
        refs |= set(re.findall(r'from "\./([^"]+)"', text))
    local = {r for r in refs if not r.startswith("data:")}
    assert local == {
        "style.css",
        "app.js",
        "msgpack.js",
        "protocol.js",
        "screen.js",
        "session.js",
        "tree.js",
        "inputs.js",
        "wire.js",
    }
    assert local <= set(STATIC_FILES)


def test_package_data_ships_every_static_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["openenv_ws"]
    for name in STATIC_FILES:
        path = f"web/static/{name}"
        assert any(fnmatch.fnmatch(path, p) for p in patterns), f"{path} is not package data"


@pytest.mark.parametrize("web", [True, False])
def test_serve_command_serves_the_page_unless_no_web(web: bool) -> None:
    args = ["--env", "atari"] + ([] if web else ["--no-web"])
    with (
        LocalServerProvider(args=args) as server,
        httpx.Client(base_url=server.http_url, timeout=10 * UNIT) as http,
    ):
        page = http.get("/web/")
        info = http.get("/web/info")
    if web:
        assert page.status_code == 200 and '<canvas id="screen"' in page.text
        assert "pong" in info.json()["games"]
    else:
        assert page.status_code == 404 and info.status_code == 404
