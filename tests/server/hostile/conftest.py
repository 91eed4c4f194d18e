"""The hostile-peer suite: raw sockets against a real ``openenv-ws serve``, a healthy session alongside.

Every test here plays an outsider attacking a server subprocess (the same
``openenv-ws serve`` users run, started by :class:`LocalServerProvider`) with
frames and bytes the project's own clients never send, while a
:class:`Neighbour` (an honest session, driven by the project's sync client on
a thread) steps throughout. After the attack a test checks what the issue
names: the neighbour is still stepping without an error, ``/health``
answers, and the server's memory stayed bounded.

No assertion here is about speed: waits are liveness bounds scaled from
``UNIT`` ("a step completes within 10 units"), never latency targets. The
figures (p99 under a flood, RSS during a 60 s ping flood) come from
the ``hostile`` scenario of ``openenv-ws bench``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

from ..._rawwire import RawWS
from ...conftest import UNIT
from ..reliability.conftest import wait_until

__all__ = [
    "MB",
    "UNIT",
    "HostileServer",
    "Neighbour",
    "RawWS",
    "assert_contained",
    "hostile_server",
    "wait_until",
]

MB = 1 << 20


@dataclass
class HostileServer:
    """A running ``openenv-ws serve`` subprocess under attack."""

    provider: LocalServerProvider

    @property
    def host(self) -> str:
        return self.provider.host

    @property
    def port(self) -> int:
        assert self.provider.port is not None
        return self.provider.port

    @property
    def url(self) -> str:
        return self.provider.url

    @property
    def http_url(self) -> str:
        return self.provider.http_url

    @property
    def pid(self) -> int:
        pid = self.provider.pid
        assert pid is not None, "the server is not running"
        return pid

    def alive(self) -> bool:
        process = self.provider.process
        return process is not None and process.poll() is None

    def rss(self) -> int:
        """The server's resident memory in bytes (its workers' too, with ``--workers``)."""
        process = psutil.Process(self.pid)
        total: int = process.memory_info().rss
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += child.memory_info().rss
        return total

    def health(self, *, timeout: float = 10.0) -> dict[str, Any]:
        """``GET /health``; fails the test (naming the problem) if it does not answer in time."""
        request = urllib.request.Request(f"{self.http_url}/health")
        try:
            with urllib.request.urlopen(request, timeout=timeout * UNIT) as response:
                body: dict[str, Any] = json.loads(response.read())
        except OSError as exc:
            raise AssertionError(f"/health did not answer: {exc!r}") from None
        assert body.get("status") == "ok", body
        return body

    def raw(self, **kwargs: Any) -> RawWS:
        """A handshaken raw WebSocket connection to ``/ws`` (see :class:`RawWS`)."""
        return RawWS(self.host, self.port, **kwargs)

    def output(self) -> str:
        """What the server has printed so far (for failure messages)."""
        return self.provider._output()


@contextlib.contextmanager
def hostile_server(
    *args: str, env: Mapping[str, str] | None = None, startup_timeout: float = 60.0
) -> Iterator[HostileServer]:
    """``openenv-ws serve ARGS`` on a free loopback port, stopped (and reaped) on exit.

    The default environment is ``fake``; pass ``"--env", "atari"`` for Atari.
    """
    argv = list(args)
    if "--env" not in argv:
        argv = ["--env", "fake", *argv]
    provider = LocalServerProvider(
        args=argv, env=dict(env or {}), startup_timeout=startup_timeout * UNIT
    )
    with provider:
        yield HostileServer(provider)


class Neighbour:
    """An honest session stepping on a background thread for as long as it runs.

    It resets, then steps action 0 (resetting at the end of each episode)
    until stopped, counting steps; the first exception it meets is kept in
    :attr:`error` and ends it. Use as a context manager; :meth:`check` is the
    test's assertion that it is alive and well.

    Args:
        server: the server under attack.
        config: the session's ``open`` config (default ``{}``: the fake environment).
        timeout: the client's per-request timeout, in units.
    """

    def __init__(
        self,
        server: HostileServer,
        config: Mapping[str, Any] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.url = server.url
        self.config = dict(config or {})
        self.timeout = timeout * UNIT
        self.steps = 0
        self.latencies: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="neighbour", daemon=True)

    def _run(self) -> None:
        try:
            with EnvClient(
                self.url,
                config=self.config,
                timeout=self.timeout,
                open_timeout=self.timeout,
                resume=False,
            ) as env:
                env.reset(seed=0)
                self._ready.set()
                while not self._stop.is_set():
                    start = time.perf_counter()
                    result = env.step(0)
                    self.latencies.append(time.perf_counter() - start)
                    self.steps += 1
                    if result.done:
                        env.reset()
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.error = exc
        finally:
            self._ready.set()

    def start(self) -> Neighbour:
        self._thread.start()
        if not self._ready.wait(self.timeout):
            raise AssertionError("the neighbour session did not open within its timeout")
        if self.error is not None:
            raise AssertionError(f"the neighbour session failed to start: {self.error!r}")
        return self

    def check(self, *, within: float = 10.0) -> None:
        """Assert the neighbour has no error and completes another step within `within` units."""
        mark = self.steps
        wait_until(
            lambda: self.steps > mark or self.error is not None or not self._thread.is_alive(),
            within * UNIT,
            what="a step of the neighbour session",
            step=0.005,
        )
        assert self.error is None, f"the neighbour session failed: {self.error!r}"
        assert self._thread.is_alive(), "the neighbour session ended"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def __enter__(self) -> Neighbour:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def assert_contained(
    server: HostileServer,
    neighbour: Neighbour,
    *,
    rss_before: int,
    max_growth: int = 50 * MB,
) -> None:
    """The server survived: alive, ``/health`` answers, the neighbour steps, memory bounded."""
    assert server.alive(), f"the server died:\n{server.output()[-3000:]}"
    server.health()
    neighbour.check()
    growth = server.rss() - rss_before
    assert growth <= max_growth, (
        f"server RSS grew by {growth / MB:.0f} MB (bound {max_growth / MB:.0f} MB)"
    )
