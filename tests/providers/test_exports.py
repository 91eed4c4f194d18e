"""The providers package exports what its docstring lists and imports no engine up front."""

from __future__ import annotations

import subprocess
import sys

import openenv_ws.providers as providers


def test_exports_exist_and_are_documented() -> None:
    for name in providers.__all__:
        assert hasattr(providers, name), name
    for name in ("LocalServerProvider", "DockerProvider", "RayProvider"):
        assert f":class:`{name}`" in (providers.__doc__ or ""), name


def test_importing_the_providers_loads_neither_docker_nor_ray() -> None:
    code = "import sys, openenv_ws.providers; print(sorted({'docker', 'ray'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
