"""Servers for the scenarios: ours (``openenv-ws serve``) and peers, each in its own process.

Both bind a free loopback port, are pinned to the placement's server cores
once healthy (threads they start later inherit the pinning), and stop when
the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import inspect
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from openenv_ws.providers import LocalServerProvider
from openenv_ws.providers._base import read_output
from openenv_ws.providers.local import _die_with_parent

from .measure import Placement

__all__ = [
    "PeerServer",
    "PeerUnavailable",
    "our_server",
    "pool_args",
    "serve_supports",
    "supports_pool",
    "tls_files",
    "wait_pool_full",
]


@contextlib.contextmanager
def our_server(placement: Placement, args: Sequence[str] = ()) -> Iterator[LocalServerProvider]:
    """An ``openenv-ws serve`` subprocess pinned as `placement` says."""
    with LocalServerProvider(args=list(args)) as server:
        assert server.process is not None
        placement.pin_server(server.process.pid)
        yield server


def settle(server: LocalServerProvider, timeout: float = 15.0) -> None:
    """Wait until `server`'s warm pool is full again (no ROM load running in the background).

    A refill loads ROMs on the server's core; an in-process reference measured
    meanwhile on the same core would be slowed by it.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool = (server.health() or {}).get("pool")
        if pool is None or pool["ready"] >= pool["size"] * pool["configs"]:
            return
        time.sleep(0.05)


@functools.cache
def _serve_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "openenv_ws", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def serve_supports(option: str) -> bool:
    """Whether this build's ``openenv-ws serve`` has `option` (e.g. ``--pool-size``)."""
    return option in _serve_help()


def client_keywords(client: Any) -> set[str]:
    """The keywords this build's client class `client` takes: its signature's, and those of
    the options ``TypedDict`` its ``**options: Unpack[...]`` names (if any)."""
    signature = inspect.signature(client.__init__)
    names = set(signature.parameters)
    for param in signature.parameters.values():
        if param.kind is not param.VAR_KEYWORD:
            continue
        try:
            hint = typing.get_type_hints(client.__init__).get(param.name)
        except Exception:  # noqa: BLE001 - an unresolvable annotation: the signature alone
            hint = None
        for arg in typing.get_args(hint):
            names |= set(getattr(arg, "__optional_keys__", ()))
            names |= set(getattr(arg, "__required_keys__", ()))
    return names


def supports_pool() -> bool:
    """Whether this build's server has a warm emulator pool (``--pool-size``)."""
    return serve_supports("--pool-size")


def pool_args(size: int, config: Mapping[str, object] | None = None) -> list[str]:
    """``serve`` options for a pool of `size` per config, `config` kept warm from the start."""
    args = ["--pool-size", str(size)]
    if config is not None and size > 0:
        args += ["--pool-warm", json.dumps(dict(config))]
    return args


def wait_pool_full(server: LocalServerProvider, timeout: float = 30.0) -> None:
    """Wait until the server's pool has every slot ready (``/health`` says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool = (server.health() or {}).get("pool")
        if pool is not None and pool["ready"] >= pool["size"] * max(1, pool["configs"]):
            return
        time.sleep(0.01)
    raise TimeoutError(f"the server's warm pool did not fill within {timeout} s")


class PeerUnavailable(RuntimeError):
    """A peer could not be started; the message says why (shown in its table row)."""


class PeerServer:
    """``python -m MODULE [ARGS]`` serving HTTP; it prints ``serving on http://HOST:PORT``
    (or, as ``openenv-ws serve`` does, ``serving protocol v1 on ws://HOST:PORT/ws``).

    Args:
        module: the module to run.
        env: extra environment variables (the peer's configuration).
        placement: where to pin the server process.
        startup_timeout: seconds to wait until ``GET /health`` answers 200.
        args: the module's arguments.
        prefix: a command the Python command runs under (``ip netns exec NAME``).
        host: the address ``/health`` is asked at.
        ca_file: ask ``/health`` over HTTPS, trusting this CA bundle.
    """

    READY = re.compile(
        r"serving (?:protocol v\d+ )?on (?:http|ws)s?://(?P<host>[\d.]+):(?P<port>\d+)"
    )

    def __init__(
        self,
        module: str,
        *,
        env: Mapping[str, str],
        placement: Placement,
        startup_timeout: float = 90.0,
        args: Sequence[str] = (),
        prefix: Sequence[str] = (),
        host: str = "127.0.0.1",
        ca_file: str | None = None,
    ) -> None:
        self.module = module
        self.env = dict(env)
        self.placement = placement
        self.startup_timeout = startup_timeout
        self.args = list(args)
        self.prefix = list(prefix)
        self.ca_file = ca_file
        self.process: subprocess.Popen[bytes] | None = None
        self.host = host
        self.port: int | None = None
        self._log: IO[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def output(self) -> str:
        if self._log is None:
            return ""
        return read_output(self._log)

    def __enter__(self) -> PeerServer:
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", self.module, *self.args],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        self.placement.pin_server(self.process.pid)
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.output().strip().splitlines()[-1:] or ["no output"]
                raise PeerUnavailable(
                    f"{self.module} exited with code {self.process.returncode}: {tail[0]}"
                )
            if self.port is None and (match := self.READY.search(self.output())):
                self.port = int(match["port"])
            if self.port is not None and self._healthy():
                return
            time.sleep(0.05)
        raise PeerUnavailable(
            f"{self.module} did not answer /health within {self.startup_timeout} s"
        )

    def _healthy(self) -> bool:
        conn: http.client.HTTPConnection
        if self.ca_file is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=2.0)
        else:
            context = ssl.create_default_context(cafile=self.ca_file)
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=2.0, context=context)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


@contextlib.contextmanager
def tls_files(host: str) -> Iterator[tuple[str, str, str] | None]:
    """(certificate chain, key, CA) files of a throwaway CA naming `host`, or None without
    trustme."""
    try:
        import trustme
    except ImportError:
        yield None
        return
    ca = trustme.CA()
    cert = ca.issue_cert(host)
    with tempfile.TemporaryDirectory(prefix="oew-tls-") as folder:
        chain, key, bundle = (str(Path(folder, n)) for n in ("chain.pem", "key.pem", "ca.pem"))
        for i, pem in enumerate(cert.cert_chain_pems):
            pem.write_to_path(chain, append=i > 0)
        cert.private_key_pem.write_to_path(key)
        ca.cert_pem.write_to_path(bundle)
        yield chain, key, bundle
