"""Servers in containers: run a server image with its port published on 127.0.0.1.

Needs the ``docker`` package (``pip install 'openenv-ws[docker]'``) and a
reachable engine (``DOCKER_HOST`` or the default socket).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ServerUnavailable
from ._base import OneServer

__all__ = ["DEFAULT_LABEL", "HOST_LABEL", "DockerProvider"]

logger = logging.getLogger("openenv_ws.providers.docker")

#: Label put on every container a provider starts (value: the owner's pid).
DEFAULT_LABEL = "io.openenv-ws.provider"
#: Label naming the host of that owner (pids mean something only there).
HOST_LABEL = "io.openenv-ws.provider-host"


def _docker_module() -> Any:
    try:
        import docker
    except ImportError:
        raise ServerUnavailable(
            "the Docker provider needs the docker package: pip install 'openenv-ws[docker]'"
        ) from None
    return docker


def _connect() -> Any:
    """A client of the engine ``DOCKER_HOST`` names (default: the usual socket) that answers."""
    docker = _docker_module()
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    hint = "start Docker or point DOCKER_HOST at a running engine"
    # Asking a missing socket would only fail later, less clearly.
    if where.startswith("unix://") and not os.path.exists(where[len("unix://") :]):
        raise ServerUnavailable(f"no Docker engine answers at {where} (no socket); {hint}")
    client = None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()
        raise ServerUnavailable(f"no Docker engine answers at {where} ({exc}); {hint}") from None
    return client


class DockerProvider(OneServer):
    """Run a server image in a container; its URL is a random port on 127.0.0.1.

    The container's server port is published on ``host`` at a port the engine
    picks, the provider polls ``GET /health`` until it answers (Docker's own
    HEALTHCHECK runs too slowly to wait on), and :meth:`stop` stops the
    container (its STOPSIGNAL, SIGKILL after ``stop_timeout``) and removes it.
    A container that fails to start, exits or does not become healthy in time
    is removed too, and the error carries the tail of its logs::

        with DockerProvider("openenv-ws/atari") as server:
            with AtariEnv(server.url, game="pong") as env:
                env.reset(seed=0)

    Args:
        image: the image to run (e.g. one built from this repository's Dockerfile).
        port: the server's port inside the container.
        host: the host address to publish on (default 127.0.0.1: only this machine).
        command: the container command instead of the image's ``CMD``.
        environment: environment variables for the container.
        pull: pull the image when the engine does not have it (like ``docker run``).
        startup_timeout: seconds for the container to answer ``/health``.
        stop_timeout: seconds between the stop signal and SIGKILL.
        run_options: more keyword arguments for ``docker.containers.run``
            (``mem_limit``, ``cpuset_cpus``, ``network``, ...).
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).

    Raises (from :meth:`start`):
        ServerUnavailable: no engine, no such image, or the server did not come up.
    """

    not_running = "the container is not running; call start() first"

    def __init__(
        self,
        image: str,
        *,
        port: int = 8000,
        host: str = "127.0.0.1",
        command: Sequence[str] | None = None,
        environment: Mapping[str, str] | None = None,
        pull: bool = True,
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        run_options: Mapping[str, Any] | None = None,
        client: Any = None,
    ) -> None:
        self.image = image
        self.port = port
        self.host = host
        self.command = list(command) if command is not None else None
        self.environment = dict(environment or {})
        self.pull = pull
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.run_options = dict(run_options or {})
        self.host_port: int | None = None
        #: The container's exit code once :meth:`stop` has stopped it.
        self.exit_code: int | None = None
        self._client = client
        self._own_client = client is None
        self._container: Any = None
        self._lock = threading.Lock()
        self._stopping = False
        self._finalizer: weakref.finalize[Any, Any] | None = None

    # ------------------------------------------------------------------ addresses

    @property
    def _connect_host(self) -> str:
        # A port published on every interface is still reached through loopback here.
        return "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host

    def _address(self) -> tuple[str, int] | None:
        return None if self.host_port is None else (self._connect_host, self.host_port)

    @property
    def container_id(self) -> str | None:
        """The running container's id."""
        container = self._container
        return container.id if container is not None else None

    # ------------------------------------------------------------------ life cycle

    def _docker(self) -> Any:
        if self._client is None:
            self._client = _connect()
        return self._client

    def _ensure_image(self, client: Any) -> None:
        docker = _docker_module()
        try:
            client.images.get(self.image)
            return
        except docker.errors.ImageNotFound:
            if not self.pull:
                raise ServerUnavailable(
                    f"the engine has no image {self.image!r}; build it "
                    f"(docker build -t {self.image} .) or pass pull=True"
                ) from None
        try:
            client.images.pull(self.image)
        except docker.errors.DockerException as exc:
            raise ServerUnavailable(
                f"the engine has no image {self.image!r} and cannot pull it ({exc}); "
                f"build it with docker build -t {self.image} ."
            ) from None

    def start(self) -> DockerProvider:
        """Start the container and wait until its server answers ``/health``.

        Raises:
            ServerUnavailable: see the class docstring; no container is left behind.
        """
        with self._lock:
            if self._container is not None:
                return self
            if self._stopping:
                raise ServerUnavailable(
                    "this DockerProvider was stopped; create a new one to start another container"
                )
        docker = _docker_module()
        client = self._docker()
        try:
            self._ensure_image(client)
            container = client.containers.run(
                self.image,
                self.command,
                detach=True,
                ports={f"{self.port}/tcp": (self.host, None)},
                environment=self.environment,
                labels={DEFAULT_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()},
                **self.run_options,
            )
        except BaseException as exc:
            if self._own_client:
                self._close_client()
            if isinstance(exc, docker.errors.DockerException):
                raise ServerUnavailable(
                    f"the engine could not start {self.image!r}: {exc}"
                ) from None
            raise
        with self._lock:
            self._container = container
            self._finalizer = weakref.finalize(self, _remove, container, self.stop_timeout)
            stopping = self._stopping
        try:
            if stopping:
                raise ServerUnavailable(f"the {self.image!r} container was stopped while starting")
            self._wait_ready(container)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, container: Any) -> None:
        deadline = time.monotonic() + self.startup_timeout
        next_check = 0.0
        while True:
            now = time.monotonic()
            if self._stopping:
                raise ServerUnavailable(f"the {self.image!r} container was stopped while starting")
            if now >= next_check:  # asking the engine costs more than a health poll
                next_check = now + 0.25
                container.reload()
                if container.status in ("exited", "dead"):
                    code = container.attrs["State"].get("ExitCode")
                    raise ServerUnavailable(
                        f"the {self.image!r} container exited with code {code} before its "
                        f"server answered:\n{self._logs(container)}"
                    )
                if self.host_port is None:
                    self.host_port = _published_port(container, self.port)
            if self.host_port is not None and self.health(timeout=1.0) is not None:
                return
            if now >= deadline:
                raise ServerUnavailable(
                    f"the {self.image!r} container did not answer GET /health on port "
                    f"{self.port} within {self.startup_timeout} s:\n{self._logs(container)}"
                )
            time.sleep(0.05)

    @staticmethod
    def _logs(container: Any, lines: int = 30) -> str:
        with contextlib.suppress(Exception):
            text: str = container.logs(tail=lines).decode("utf-8", "replace")
            return text.rstrip() or "(no output)"
        return "(logs unavailable)"

    def logs(self, lines: int = 100) -> str:
        """The last `lines` lines the server printed."""
        return self._logs(self._container, lines) if self._container is not None else ""

    def stop(self) -> None:
        """Stop and remove the container. Idempotent, and final: a stopped provider
        does not start again. Safe to call from another thread while :meth:`start`
        runs (that start then fails and removes its container)."""
        with self._lock:
            self._stopping = True
            container, self._container = self._container, None
            finalizer, self._finalizer = self._finalizer, None
        self.host_port = None
        if container is not None:
            if finalizer is not None:
                finalizer.detach()
            self.exit_code = _remove(container, self.stop_timeout)
        if self._own_client:
            self._close_client()

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    @staticmethod
    def remove_orphans(client: Any = None) -> list[str]:
        """Remove the containers of providers whose process on this host is gone.

        A provider removes its container when it stops, is collected or its
        process exits; a process killed outright (SIGKILL) cannot, and its
        container keeps running. Call this (e.g. before a test run) to clean
        up after such owners. Containers of live owners and of other hosts are
        left alone; so is any container when this process cannot see the
        owners' pids (run it on the owners' host, outside their PID namespace).

        Returns:
            The ids of the containers removed.
        """
        own = client is None
        client = client or _connect()
        try:
            host = socket.gethostname()
            found = client.containers.list(
                all=True, filters={"label": [DEFAULT_LABEL, f"{HOST_LABEL}={host}"]}
            )
            removed = []
            for container in found:
                owner = container.labels.get(DEFAULT_LABEL, "")
                if owner.isdigit() and not _pid_alive(int(owner)):
                    _remove(container, timeout=0)
                    removed.append(container.id)
            return removed
        finally:
            if own:
                client.close()

    def __enter__(self) -> DockerProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _published_port(container: Any, port: int) -> int | None:
    bindings = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in bindings.get(f"{port}/tcp") or ():
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    return None


def _remove(container: Any, timeout: float) -> int | None:
    """Stop `container` (SIGKILL after `timeout`), remove it; its exit code if known."""
    code = None
    try:
        with contextlib.suppress(Exception):
            container.stop(timeout=max(1, round(timeout)))
            container.reload()
            code = container.attrs["State"].get("ExitCode")
    finally:
        try:
            container.remove(force=True, v=True)
        except Exception as exc:  # noqa: BLE001 - reported, never raised from cleanup
            if "No such container" not in str(exc):
                logger.warning("could not remove container %s: %s", container.id, exc)
    return code


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
