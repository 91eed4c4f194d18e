"""Helpers of the reliability tests: servers with chosen limits, waits, raw sockets."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from openenv_ws.environment import EnvFactory
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

from ...conftest import UNIT

__all__ = ["UNIT", "health", "serve", "server_then_killed", "wait_until"]


def wait_until(
    condition: Callable[[], Any], timeout: float, *, what: str = "condition", step: float = 0.01
) -> float:
    """Poll `condition` until it is true; return the seconds it took, fail after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        time.sleep(step)
    return time.monotonic() - start


def health(http_url: str, *, headers: dict[str, str] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(f"{http_url}/health", headers=headers or {})
    with urllib.request.urlopen(request, timeout=10 * UNIT) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


@contextlib.contextmanager
def serve(
    factory: EnvFactory = fake_factory,
    *,
    token: str | None = None,
    ping_interval: float | None = 20.0,
    ping_timeout: float | None = 20.0,
    web: bool = False,
    allowed_origins: tuple[str, ...] = (),
    **limits: Any,
) -> Iterator[ServerThread]:
    """A live server on a loopback port with the given limits."""
    app = create_app(
        factory,
        limits=ServerLimits(ping_interval=ping_interval, ping_timeout=ping_timeout, **limits),
        token=token,
        web=web,
        allowed_origins=allowed_origins,
    )
    with ServerThread(app) as server:
        yield server


@pytest.fixture
def server() -> Iterator[ServerThread]:
    """FakeEnvironment sessions with the default grace period."""
    with serve() as live:
        yield live


@contextlib.contextmanager
def server_then_killed() -> Iterator[str]:
    """The URL of a fake-env ``openenv-ws serve`` subprocess, SIGKILLed when the block ends.

    Gone without a word: no close frames, and nothing listens on its port any more.
    """
    cmd = [sys.executable, "-m", "openenv_ws", "serve", "--env", "fake", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip().rsplit(" ", 1)[-1]
    finally:
        proc.kill()
        proc.communicate(timeout=10 * UNIT)
