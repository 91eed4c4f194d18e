"""TLS fixtures: a test certificate authority (trustme), certificates for 127.0.0.1 and
localhost (good, for another host, expired), and real uvicorn servers serving TLS
with them on ephemeral loopback ports.

No test here sends a byte to a host other than this one: the token rule's
hosts (``example.invalid``, 10.255.255.1) are only ever strings the client
checks before it creates a socket.
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

__all__ = ["Pki", "tls_thread"]


@dataclass(frozen=True)
class Pki:
    """PEM files of one test CA and the server certificates it issued."""

    ca_file: Path  #: the CA certificate (what clients pass as ca_file)
    server: Path  #: key + chain for 127.0.0.1 and localhost
    cert: Path  #: the same certificate alone (no key)
    key: Path  #: its private key alone
    other_key: Path  #: the private key of another certificate (a mismatch)
    wrong_host: Path  #: key + chain for example.org only
    expired: Path  #: key + chain for 127.0.0.1 whose validity ended yesterday
    ip_only: Path  #: key + chain for 127.0.0.1 only (not localhost)

    def context(self) -> ssl.SSLContext:
        """A client context trusting the test CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    good = ca.issue_cert("127.0.0.1", "localhost")
    now = datetime.datetime.now(datetime.UTC)
    expired = ca.issue_cert(
        "127.0.0.1",
        not_before=now - datetime.timedelta(days=30),
        not_after=now - datetime.timedelta(days=1),
    )
    files = {
        "ca_file": ca.cert_pem,
        "server": good.private_key_and_cert_chain_pem,
        "cert": good.cert_chain_pems[0],
        "key": good.private_key_pem,
        "other_key": ca.issue_cert("127.0.0.1").private_key_pem,
        "wrong_host": ca.issue_cert("example.org").private_key_and_cert_chain_pem,
        "expired": expired.private_key_and_cert_chain_pem,
        "ip_only": ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem,
    }
    paths = {}
    for name, blob in files.items():
        paths[name] = folder / f"{name}.pem"
        blob.write_to_path(str(paths[name]))
    return Pki(**paths)


def tls_thread(certfile: Path, factory: object = fake_factory, **limits: Any) -> ServerThread:
    """A (not yet started) server serving TLS with `certfile` (key + chain)."""
    app = create_app(factory, limits=ServerLimits(max_sessions=16, **limits))
    return ServerThread(app, ssl_certfile=str(certfile))


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[ServerThread]:
    """A live TLS server hosting FakeEnvironment sessions, certificate from the test CA."""
    with tls_thread(pki.server) as server:
        yield server


@pytest.fixture(scope="module")
def tls_atari_server(pki: Pki) -> Iterator[ServerThread]:
    """A live TLS server hosting Atari sessions."""
    from atari import atari_factory

    with tls_thread(pki.server, atari_factory) as server:
        yield server
