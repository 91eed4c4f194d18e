"""Shared fixtures: real uvicorn servers on ephemeral loopback ports.

In CI (``CI=true``) a skipped test is reported as a failure: a test that
needs a real engine must run there, never silently skip.

The suite runs on several pytest-xdist workers (pyproject.toml's addopts). A
test that uses something the whole machine shares (network namespaces, a
Ray instance, the Docker engine's image store) holds that thing's
:func:`machine_lock`, or is marked ``exclusive(NAME)`` to hold it for the test.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

#: One time unit for waits in tests; everything scales from it.
UNIT = float(os.environ.get("OPENENV_WS_TEST_UNIT", "1.0"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the lock `name` shared by every test process on this machine while the block runs.

    xdist workers are processes, so a lock of one process (threading) would not do; a
    flock on a file in the temp folder is also held against other test runs at the same time.
    """
    path = Path(tempfile.gettempdir()) / f"openenv-ws-tests-{name}.lock"
    with path.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _exclusive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``exclusive(NAME)`` runs holding ``machine_lock(NAME)``."""
    marker = request.node.get_closest_marker("exclusive")
    if marker is None:
        yield
        return
    with machine_lock(marker.args[0]):
        yield


@pytest.fixture
def fake_server() -> Iterator[ServerThread]:
    """A live server hosting FakeEnvironment sessions."""
    with ServerThread(create_app(fake_factory, limits=ServerLimits(max_sessions=8))) as server:
        yield server


@pytest.fixture(scope="session")
def atari_server() -> Iterator[ServerThread]:
    """A live server hosting Atari sessions (shared by the tests of a run)."""
    from atari import atari_factory

    with ServerThread(create_app(atari_factory)) as server:
        yield server
