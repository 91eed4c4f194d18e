"""Fixtures of the OpenEnv compatibility suite: servers, and openenv-core 0.1.x on the side.

openenv-core 0.3.x (the test extra) and 0.1.x are one distribution in two
versions, which one environment cannot hold. 0.1.x (its ``HTTPEnvClient``) is
installed without dependencies into a cache folder by :func:`openenv_core_01`
on first use and run in a subprocess whose ``PYTHONPATH`` puts it first; the
dependencies it imports (requests, fastapi, pydantic) come with 0.3.x.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

#: The old client generation whose HTTPEnvClient must keep working.
OPENENV_01 = "openenv-core==0.1.1"


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openenv-ws-tests"


@pytest.fixture(scope="session")
def openenv_core_01() -> Path:
    """A folder holding openenv-core 0.1.x, to put first on a subprocess's PYTHONPATH."""
    target = _cache_root() / OPENENV_01.replace("==", "-")
    if (target / "openenv_core" / "http_env_client.py").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="openenv-core-01-", dir=target.parent))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    cmd += ["--no-deps", "--target", str(staging), OPENENV_01]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(
            f"{OPENENV_01} could not be installed into {target} (it needs PyPI on first use, "
            f"then the cache): {done.stderr.strip()[-300:]}"
        )
    try:
        staging.rename(target)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def pong_server() -> Iterator[ServerThread]:
    """Atari sessions; OpenEnv's clients get Pong with 60-step episodes."""
    from atari import atari_factory

    app = create_app(atari_factory, openenv_config={"game": "pong", "max_episode_steps": 60})
    with ServerThread(app) as server:
        yield server


@pytest.fixture
def fake_compat_server() -> Iterator[ServerThread]:
    """Fake sessions (4x4 observations, 3-step episodes) for OpenEnv's clients; 2 at most."""
    app = create_app(
        fake_factory,
        limits=ServerLimits(max_sessions=2),
        openenv_config={"episode_length": 3},
    )
    with ServerThread(app) as server:
        yield server
