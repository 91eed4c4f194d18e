"""Servers for the OpenEnv environments suite: openenv-ws serving them unchanged, and
openenv-core's own server (its ``create_app`` under uvicorn) hosting the same ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn

from openenv_ws.envs.openenv import openenv_plugin
from openenv_ws.server import ServerLimits, ServerThread, bind_socket, create_app
from tests.conftest import UNIT
from tests.envs.openenv_envs.envs import EchoAction, EchoEnvironment, EchoObservation


class CoreServer:
    """openenv-core's ``create_app`` for an environment, under plain uvicorn on a thread."""

    def __init__(self, env: Callable[[], Any], action: type, observation: type, **kw: Any) -> None:
        from openenv.core.env_server.http_server import create_app as core_app

        self._sock = bind_socket("127.0.0.1", 0)
        self.port = self._sock.getsockname()[1]
        app = core_app(env, action, observation, **kw)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self.server.run, args=([self._sock],), daemon=True)

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> CoreServer:
        self._thread.start()
        deadline = time.monotonic() + 30 * UNIT
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("openenv-core's server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(30 * UNIT)
        self._sock.close()


def served(env: Any, *classes: Any, max_sessions: int = 80) -> ServerThread:
    """openenv-ws serving `env` unchanged (its OpenEnv sessions open with ``{}``)."""
    app = create_app(openenv_plugin(env, *classes), limits=ServerLimits(max_sessions=max_sessions))
    return ServerThread(app)


@pytest.fixture(scope="module")
def echo_server() -> Iterator[ServerThread]:
    """openenv-ws serving the echo environment of openenv-core's documentation."""
    with served(EchoEnvironment, EchoAction, EchoObservation) as server:
        yield server


@pytest.fixture(scope="module")
def echo_core() -> Iterator[CoreServer]:
    """openenv-core's own server hosting the same echo environment."""
    with CoreServer(EchoEnvironment, EchoAction, EchoObservation, max_concurrent_envs=4) as core:
        yield core
