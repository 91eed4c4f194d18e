"""DNS rebinding and origin spoofing: a web page cannot drive a local server.

A page of ``evil.example`` whose name is then pointed at 127.0.0.1 reaches
the server as its own origin: ``Host`` and ``Origin`` both name
``evil.example``. The server answers only to the hosts it knows
(``localhost``, IP addresses, ``--allow-host``) and compares the whole origin,
scheme included, with the request. Its own web page keeps working from
``http://127.0.0.1:P`` and ``http://localhost:P``.
"""

from __future__ import annotations

from ..._rawwire import Answer, exchange, request_bytes, upgrade_bytes
from .conftest import UNIT, HostileServer, Neighbour, hostile_server


def _upgrade(server: HostileServer, host: str, origin: str | None = None) -> Answer:
    headers = () if origin is None else (f"Origin: {origin}",)
    return exchange(server.host, server.port, upgrade_bytes(host, *headers), timeout=10 * UNIT)


def _request(server: HostileServer, method: str, path: str, host: str, *headers: str) -> Answer:
    body = b'{"config": {}}' if method == "POST" else b""
    request = request_bytes(method, path, host, *headers, body=body)
    return exchange(server.host, server.port, request, timeout=10 * UNIT)


def _refused_for_host(answer: Answer, name: str) -> None:
    assert answer.status == 403, answer
    body = answer.json()
    assert body["error"] == "host", body
    assert f"--allow-host {name}" in body["message"], body


def test_rebinding_host_is_refused_everywhere() -> None:
    with hostile_server() as server, Neighbour(server) as neighbour:
        evil = f"evil.example:{server.port}"
        # The page's own origin, as the browser sends it after the rebinding.
        _refused_for_host(_upgrade(server, evil, f"http://{evil}"), "evil.example")
        _refused_for_host(_upgrade(server, evil), "evil.example")
        post = ("Content-Type: text/plain", f"Origin: http://{evil}")
        _refused_for_host(_request(server, "POST", "/v1/sessions", evil, *post), "evil.example")
        _refused_for_host(_request(server, "GET", "/web/", evil), "evil.example")
        _refused_for_host(_request(server, "GET", "/health", evil), "evil.example")
        # A trailing dot or another case is the same name.
        _refused_for_host(_upgrade(server, f"EVIL.example.:{server.port}"), "evil.example")
        # The server's own names still serve its web page and its sessions.
        for name in ("127.0.0.1", "localhost", "[::1]", "LocalHost"):
            host = f"{name}:{server.port}"
            assert _upgrade(server, host, f"http://{host.lower()}").status == 101, host
            assert _upgrade(server, host).status == 101, host  # a client that is not a browser
            home = _request(server, "GET", "/", host)
            assert home.status == 307 and home.headers["location"] == "/web/", home
            page = _request(server, "GET", "/web/", host)
            assert page.status == 200 and b"<canvas" in page.body, page
            assert _request(server, "GET", "/health", host).status == 200, host
        neighbour.check()
        server.health()


def test_origin_must_match_scheme_host_and_port() -> None:
    with hostile_server() as server, Neighbour(server) as neighbour:
        own = f"127.0.0.1:{server.port}"
        assert _upgrade(server, own, f"https://{own}").status == 403
        assert _upgrade(server, own, f"ws://{own}").status == 403
        assert _upgrade(server, own, f"http://127.0.0.1:{server.port + 1}").status == 403
        answer = _request(
            server,
            "POST",
            "/v1/sessions",
            own,
            "Content-Type: text/plain",
            f"Origin: https://{own}",
        )
        assert answer.status == 403 and answer.json()["error"] == "origin", answer
        neighbour.check()


def test_allow_host_lets_a_name_in() -> None:
    with hostile_server("--allow-host", "lab.example") as server:
        lab = f"lab.example:{server.port}"
        assert _upgrade(server, lab, f"http://{lab}").status == 101
        assert _request(server, "GET", "/web/", lab).status == 200
        _refused_for_host(_upgrade(server, f"evil.example:{server.port}"), "evil.example")
    with hostile_server("--allow-host", "*") as server:
        any_host = f"evil.example:{server.port}"
        assert _upgrade(server, any_host, f"http://{any_host}").status == 101


def test_host_policy_of_a_bind_address() -> None:
    """Socket-free: what ``serve`` allows for each ``--host`` (no test binds a wildcard)."""
    from openenv_ws.server.transport.auth import HostCheck, served_hosts

    assert served_hosts("127.0.0.1", []) == ([], None)
    assert served_hosts("127.0.0.1", ["lab.example"]) == (["lab.example"], None)
    assert served_hosts("envs.internal", []) == (["envs.internal"], None)
    for wildcard in ("0.0.0.0", "::"):
        names, warning = served_hosts(wildcard, [])
        assert names == ["*"]
        assert warning is not None and "--allow-host" in warning
        assert served_hosts(wildcard, ["lab.example"]) == (["lab.example"], None)
    check = HostCheck(lambda *a: None, allowed=["lab.example:8000"])
    for host in (
        "localhost",
        "localhost:1",
        "10.1.2.3:80",
        "[fe80::1]:8000",
        "LAB.example",
        "lab.example.",
    ):
        assert check.allows(host), host
    for host in ("evil.example", "localhost.evil.example", "127.0.0.1.evil.example", "[::1].evil"):
        assert not check.allows(host), host
