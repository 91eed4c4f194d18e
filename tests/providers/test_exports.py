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


def test_a_provider_says_where_its_one_server_is_only_while_it_runs() -> None:
    """The local and Docker providers share their addresses (socket-free: nothing starts)."""
    import pytest

    from openenv_ws import ServerUnavailable
    from openenv_ws.providers import DockerProvider, LocalServerProvider, ServerProvider

    docker = DockerProvider("openenv-ws/atari", host="0.0.0.0")
    local = LocalServerProvider(host="::1")
    for provider, message in ((docker, "container is not running"), (local, "not started")):
        assert provider.health() is None
        for address in ("url", "http_url"):
            with pytest.raises(ServerUnavailable, match=message):
                getattr(provider, address)
    docker.host_port, local.port = 49152, 49153  # as start() finds them
    assert docker.url == "ws://127.0.0.1:49152/ws"  # published on every interface: loopback
    assert docker.http_url == "http://127.0.0.1:49152"
    assert local.url == "ws://[::1]:49153/ws" and local.http_url == "http://[::1]:49153"
    # The protocol check reads `url`, which only a provider whose server runs has.
    assert isinstance(docker, ServerProvider) and isinstance(local, ServerProvider)
