"""``openenv-ws serve --certfile/--keyfile``: TLS files checked up front, a clear one-line
error for each problem, and the startup lines naming wss:// and https://."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from openenv_ws.client import EnvClient, HTTPEnvClient

from ..conftest import UNIT
from .conftest import Pki


def serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def refused(*args: str) -> str:
    process = serve(*args)
    _, err = process.communicate(timeout=60 * UNIT)
    assert process.returncode != 0
    assert "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def encrypted_key(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = serialization.load_pem_private_key(pki.key.read_bytes(), None)
    path = tmp_path_factory.mktemp("keys") / "encrypted.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass phrase"),
        )
    )
    return path


def test_bad_tls_files_are_refused_with_one_clear_line(
    pki: Pki, encrypted_key: Path, tmp_path: Path
) -> None:
    cert, key = str(pki.cert), str(pki.key)
    missing = str(tmp_path / "missing.pem")
    cases = [
        (["--certfile", missing, "--keyfile", key], f"--certfile {missing}: No such file"),
        (["--certfile", cert, "--keyfile", missing], f"--keyfile {missing}: No such file"),
        (["--keyfile", key], "--keyfile needs --certfile"),
        (["--certfile", cert], "holds no PEM private key; give the key with --keyfile"),
        (["--certfile", key, "--keyfile", key], "holds no PEM certificate"),
        (["--certfile", cert, "--keyfile", str(pki.other_key)], "does not match the certificate"),
        (["--certfile", cert, "--keyfile", str(encrypted_key)], "give its password with"),
        (
            ["--certfile", cert, "--keyfile", str(encrypted_key), "--keyfile-password", "no"],
            "--keyfile-password does not decrypt the private key",
        ),
    ]
    for args, message in cases:
        assert message in refused(*args), args


@pytest.fixture
def tls_serve(pki: Pki, encrypted_key: Path) -> Iterator[tuple[str, str]]:
    """``openenv-ws serve`` with TLS (an encrypted key and its password); its two URLs."""
    process = serve(
        "--certfile", str(pki.cert), "--keyfile", str(encrypted_key),
        "--keyfile-password", "pass phrase",
    )  # fmt: skip
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        second = process.stdout.readline()
        ws = re.search(r"serving protocol v1 on (wss://127\.0\.0\.1:\d+/ws)", first)
        web = re.search(r"web page on (https://127\.0\.0\.1:\d+)/web/", second)
        assert ws is not None and web is not None, (first, second)
        yield ws.group(1), web.group(1)
    finally:
        process.terminate()
        process.communicate(timeout=60 * UNIT)


def test_serve_with_tls_names_wss_and_https(tls_serve: tuple[str, str], pki: Pki) -> None:
    ws_url, http_url = tls_serve
    with EnvClient(ws_url, ca_file=pki.ca_file, open_timeout=30 * UNIT) as env:
        env.reset(seed=0)
        env.step(0)
    with HTTPEnvClient(http_url, ca_file=pki.ca_file, open_timeout=30 * UNIT) as env:
        env.reset(seed=0)
        env.step(0)
