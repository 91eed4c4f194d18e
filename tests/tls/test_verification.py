"""Certificate verification on by default: each failure is a TLSError naming the problem
and the URL, raised at once (not retried as if the server were merely away)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openenv_ws import ServerUnavailable, SessionClosed, TLSError
from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient, VectorEnvClient
from openenv_ws.server import ServerThread

from ..conftest import UNIT
from .conftest import Pki, tls_thread

CONFIG = {"obs_shape": [4, 4]}


def open_sync(url: str, **kw: Any) -> None:
    EnvClient(url, config=CONFIG, open_timeout=10 * UNIT, **kw).close()


def open_async(url: str, **kw: Any) -> None:
    async def run() -> None:
        async with AsyncEnvClient(url, config=CONFIG, open_timeout=10 * UNIT, **kw):
            pass

    asyncio.run(run())


def open_vector(url: str, **kw: Any) -> None:
    VectorEnvClient([url, url], config=CONFIG, open_timeout=10 * UNIT, **kw).close()


def open_http(url: str, **kw: Any) -> None:
    http = url.replace("wss://", "https://").replace("ws://", "http://").removesuffix("/ws")
    HTTPEnvClient(http, config=CONFIG, open_timeout=10 * UNIT, **kw).close()


CLIENTS: dict[str, Callable[..., None]] = {
    "sync": open_sync,
    "async": open_async,
    "vector": open_vector,
    "http": open_http,
}


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """The TCP connections the blocking clients make (the async one uses the loop's)."""
    made: list[tuple[str, int]] = []
    real = socket.create_connection

    def counting(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        made.append(address)
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counting)
    yield made


@pytest.mark.parametrize("client", CLIENTS)
def test_unknown_ca_is_refused(
    tls_server: ServerThread, client: str, connections: list[Any]
) -> None:
    with pytest.raises(TLSError) as info:
        CLIENTS[client](tls_server.url)  # the system's CAs do not know the test CA
    message = str(info.value)
    assert "certificate verify failed: unable to get local issuer certificate" in message
    assert f"127.0.0.1:{tls_server.port}" in message and "ca_file=" in message
    if client != "async":
        assert len(connections) == 1  # one attempt, not retried


@pytest.mark.parametrize("client", CLIENTS)
def test_host_name_mismatch_is_refused(pki: Pki, client: str) -> None:
    with tls_thread(pki.ip_only) as server:  # valid for 127.0.0.1, not for localhost
        url = f"wss://localhost:{server.port}/ws"
        with pytest.raises(TLSError) as info:
            CLIENTS[client](url, ca_file=pki.ca_file)
        assert "certificate verify failed: Hostname mismatch" in str(info.value)
        assert f"localhost:{server.port}" in str(info.value)
        CLIENTS[client](server.url, ca_file=pki.ca_file)  # by its address it is fine


@pytest.mark.parametrize("client", CLIENTS)
def test_ip_address_mismatch_is_refused(pki: Pki, client: str) -> None:
    with tls_thread(pki.wrong_host) as server, pytest.raises(TLSError) as info:
        CLIENTS[client](server.url, ca_file=pki.ca_file)
    assert "certificate verify failed: IP address mismatch" in str(info.value)


@pytest.mark.parametrize("client", CLIENTS)
def test_expired_certificate_is_refused(pki: Pki, client: str) -> None:
    with tls_thread(pki.expired) as server, pytest.raises(TLSError) as info:
        CLIENTS[client](server.url, ca_file=pki.ca_file)
    assert "certificate verify failed: certificate has expired" in str(info.value)
    assert str(server.port) in str(info.value) and "renewed" in str(info.value)


def test_a_context_that_does_not_verify_is_the_users_explicit_choice(
    tls_server: ServerThread,
) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    open_sync(tls_server.url, ssl_context=context)


def test_resume_does_not_retry_a_certificate_failure(
    tls_server: ServerThread, pki: Pki, connections: list[Any]
) -> None:
    env = EnvClient(tls_server.url, config=CONFIG, ca_file=pki.ca_file, resume_timeout=30 * UNIT)
    try:
        env.reset(seed=1)
        connections.clear()
        # The connection drops; the client's trust changes before it resumes, so the
        # server's certificate is refused on the way back.
        env._link._ssl = ssl.create_default_context()
        assert env._link._ws is not None
        env._link._ws._sock.shutdown(socket.SHUT_RDWR)
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        assert "could not be resumed" in str(info.value)
        assert "certificate verify failed" in str(info.value)
        assert len(connections) == 1
    finally:
        env.close()


# ---------------------------------------------------------------------- TLS on one side only


@pytest.mark.parametrize("client", CLIENTS)
def test_plain_client_against_a_tls_port_fails_fast(tls_server: ServerThread, client: str) -> None:
    plain = tls_server.url.replace("wss://", "ws://")
    with pytest.raises(ServerUnavailable) as info:
        CLIENTS[client](plain)
    message = str(info.value)
    assert "closed the connection" in message, message
    assert "if it serves TLS, " + (
        "use https://" if client == "http" else "connect with wss://"
    ) in (message)


@pytest.mark.parametrize("client", CLIENTS)
def test_tls_client_against_a_plain_port_fails_fast(
    fake_server: ServerThread, pki: Pki, client: str
) -> None:
    secure = fake_server.url.replace("ws://", "wss://")
    with pytest.raises(TLSError) as info:
        CLIENTS[client](secure, ca_file=pki.ca_file)
    message = str(info.value)
    assert "does not answer in TLS (wrong version number)" in message, message
    assert f"127.0.0.1:{fake_server.port}" in message


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_plain_client_answered_with_a_tls_alert_is_told_to_use_wss(client: str) -> None:
    # Some TLS servers answer a plain request with an alert record instead of closing.
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10 * UNIT)

    def answer() -> None:
        with contextlib.suppress(OSError), listener.accept()[0] as conn:
            conn.recv(4096)
            conn.sendall(b"\x15\x03\x03\x00\x02\x02\x46")  # alert: protocol_version
            conn.recv(4096)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    url = f"ws://127.0.0.1:{listener.getsockname()[1]}/ws"
    try:
        with pytest.raises(TLSError, match="expects TLS; connect to wss://127"):
            CLIENTS[client](url)
    finally:
        thread.join(10 * UNIT)
        listener.close()
