"""The README's echo environment, as printed there, served by ``openenv-ws serve --env echo:Echo``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from openenv_ws.client import EnvClient
from openenv_ws.errors import RemoteEnvError
from openenv_ws.providers import LocalServerProvider

ROOT = Path(__file__).resolve().parents[3]


def readme_echo() -> str:
    blocks = re.findall(r"```python\n(.+?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    found = [b for b in blocks if "class Echo(Environment)" in b]
    assert len(found) == 1, "the README shows one echo environment"
    return found[0] + "\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServerProvider]:
    where = tmp_path_factory.mktemp("echo")
    (where / "echo.py").write_text(readme_echo())
    path = os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))
    provider = LocalServerProvider(
        args=["--env", "echo:Echo"], env={**os.environ, "PYTHONPATH": path}
    ).start()
    try:
        yield provider
    finally:
        provider.stop()


def test_the_readme_echo_environment_plays_as_the_readme_says(
    server: LocalServerProvider,
) -> None:
    with EnvClient(server.url) as env:
        assert env.spec.action.to_wire()["type"] == "text"
        assert env.reset().observation == {"echoed": "", "length": 0}
        result = env.step("hi")
        assert result.observation == {"echoed": "hi", "length": 2}
        assert result.reward == pytest.approx(0.2)
        with pytest.raises(RemoteEnvError, match="a string is needed, got int") as caught:
            env.step(5)
        assert caught.value.code == "invalid_action"
        with pytest.raises(RemoteEnvError, match="281 characters"):
            env.step("x" * 281)
        assert env.step("again").observation["length"] == 5
        assert env.state()["step_count"] == 2
