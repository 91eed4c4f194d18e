"""A bearer token never goes in plain text to another host unless the user says so.

The non-loopback hosts below are only strings: every test that names one
makes creating a socket or resolving a name fail the test, so the guard is
shown to act before any connection is attempted.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from openenv_ws._hosts import is_loopback
from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient, VectorEnvClient
from openenv_ws.client._tls import check_token, secure_transport
from openenv_ws.server import ServerThread, create_app
from openenv_ws.testing import fake_factory


class Connected(Exception):
    """What the patched socket layer raises instead of reaching the network."""


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any name lookup or socket made in the test raises :class:`Connected` (recorded)."""
    attempts: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(repr(args[:1]))
        raise Connected(args[:1])

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


def make_sync(url: str, **kw: Any) -> Any:
    return EnvClient(url, **kw)


def make_async(url: str, **kw: Any) -> Any:
    async def run() -> None:
        async with AsyncEnvClient(url, **kw):
            pass

    return asyncio.run(run())


def make_vector(url: str, **kw: Any) -> Any:
    return VectorEnvClient(["ws://127.0.0.1:9/ws", url], **kw)


def make_http(url: str, **kw: Any) -> Any:
    return HTTPEnvClient(url.replace("ws://", "http://"), **kw)


CLIENTS: dict[str, Callable[..., Any]] = {
    "sync": make_sync,
    "async": make_async,
    "vector": make_vector,
    "http": make_http,
}
REMOTE = ["ws://example.invalid:8000/ws", "ws://10.255.255.1:8000", "ws://[2001:db8::1]:8000"]


@pytest.mark.parametrize("url", REMOTE)
@pytest.mark.parametrize("client", CLIENTS)
def test_token_refused_over_plain_text_to_another_host(
    client: str, url: str, no_network: list[str]
) -> None:
    with pytest.raises(ValueError) as info:
        CLIENTS[client](url, token="s3cret")
    message = str(info.value)
    host = url.split("//")[1].rsplit(":", 1)[0].strip("[]")
    assert f"in plain text to {host}" in message and "allow_insecure_token=True" in message
    assert "s3cret" not in message
    assert no_network == []  # refused before any lookup or socket


@pytest.mark.parametrize("client", CLIENTS)
def test_the_environment_variable_counts_as_a_token(
    client: str, no_network: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENENV_WS_TOKEN", "from-the-environment")
    with pytest.raises(ValueError, match="token \\(from OPENENV_WS_TOKEN\\) in plain text"):
        CLIENTS[client]("ws://10.255.255.1:8000")
    assert no_network == []


@pytest.mark.parametrize("client", CLIENTS)
def test_allow_insecure_token_lets_the_client_connect(client: str, no_network: list[str]) -> None:
    # The guard lets it through: the client goes on to connect, which the test stops.
    with pytest.raises(Exception) as info:
        CLIENTS[client]("ws://10.255.255.1:8000", token="t", allow_insecure_token=True)
    assert not isinstance(info.value, ValueError), info.value
    assert no_network


def test_no_token_no_rule(no_network: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENENV_WS_TOKEN", raising=False)
    with pytest.raises(Exception) as info:
        EnvClient("ws://10.255.255.1:8000")
    assert not isinstance(info.value, ValueError) and no_network


def test_tls_urls_and_loopback_hosts_may_carry_the_token() -> None:
    for url in ("wss://example.invalid/ws", "https://10.255.255.1:8443"):
        check_token(url, "t", allow_insecure=False)
    assert secure_transport(["wss://example.invalid/ws"], "t", None, None, False) is not None
    for host in ("127.0.0.1", "127.3.2.1", "localhost", "LOCALHOST.", "::1", "[::1]"):
        assert is_loopback(host), host
        check_token(
            f"ws://{host if ':' not in host.strip('[]') else '[::1]'}:80", "t", allow_insecure=False
        )
    for host in ("10.255.255.1", "example.invalid", "localhost.example", "2001:db8::1", "", None):
        assert not is_loopback(host), host


def test_token_session_over_loopback_works() -> None:
    app = create_app(fake_factory, token="s3cret")
    with ServerThread(app) as server:
        url = server.url.replace("127.0.0.1", "localhost")
        with EnvClient(url, token="s3cret", config={"obs_shape": [2, 2]}) as env:
            assert env.reset(seed=0).observation.shape == (2, 2)
