"""``openenv-ws serve --env openenv --openenv-app module:EnvClass``: the command line."""

from __future__ import annotations

import re
import subprocess
import sys

from openenv_ws.client import EnvClient
from tests.conftest import UNIT

SERVE = [sys.executable, "-m", "openenv_ws", "serve", "--env", "openenv", "--port", "0"]


def test_serve_an_environment_class_named_on_the_command_line() -> None:
    app = ["--openenv-app", "tests.envs.openenv_envs.envs:EchoEnvironment"]
    classes = ["--openenv-action", "tests.envs.openenv_envs.envs:EchoAction"]
    classes += ["--openenv-observation", "tests.envs.openenv_envs.envs:EchoObservation"]
    with subprocess.Popen(
        SERVE + app + classes, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as server:
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            found = re.search(r"ws://[\d.]+:\d+/ws", line)
            assert found, line
            with EnvClient(found.group(0), open_timeout=30 * UNIT) as env:
                env.reset()
                result = env.step({"message": "from the command line"})
                assert result.observation["echoed_message"] == "from the command line"
                assert env.spec.extra["name"] == "EchoEnvironment"
        finally:
            server.terminate()
            server.wait(30 * UNIT)


def test_serve_refuses_what_is_not_an_openenv_app() -> None:
    for app, says in (
        ("tests.envs.openenv_envs.envs:Nothing", "cannot be imported"),
        ("tests.envs.openenv_envs.envs:EchoAction", "not an openenv-core Environment"),
        ("tests.envs.openenv_envs.envs", "not 'package.module:attribute'"),
        # an Environment whose annotations and package name no model class, given none:
        ("openenv.core.env_server.interfaces:Environment", "Action and Observation classes"),
    ):
        done = subprocess.run(
            [*SERVE, "--openenv-app", app], capture_output=True, text=True, timeout=60 * UNIT
        )
        assert done.returncode != 0 and says in done.stderr, (app, done.stderr)
