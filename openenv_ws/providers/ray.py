"""Scale-out on Ray: env-server actors, each a uvicorn server hosting many sessions.

Ray only places and supervises the servers; it is never in the step path.
Each actor runs this package's server in its own process on its node and
reports its WebSocket URL; clients connect to those URLs directly::

    import ray
    from openenv_ws.client.vector import VectorEnvClient
    from openenv_ws.providers import RayProvider

    ray.init(address="auto")                         # an existing cluster
    with RayProvider(env="atari") as servers:        # one server per CPU
        with VectorEnvClient(servers.urls, 64, config={"game": "pong"}) as envs:
            obs, infos = envs.reset(seed=0)

Needs the ``ray`` package (``pip install 'openenv-ws[ray]'``) on the driver
and on every node, with this package importable there (install it in the
nodes' image or pass ``actor_options={"runtime_env": ...}``).

When an actor dies (its process or its node), its sessions lose their
connection and their clients raise :class:`~openenv_ws.errors.SessionClosed`
(or :class:`~openenv_ws.errors.RequestTimeout` if the network path vanished
without a reset); sessions on other actors go on. :meth:`RayProvider.status`
tells which servers are gone and why. Actors are not restarted: a new
process would have a new address and none of the lost episodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..environment import EnvFactory
from ..errors import ServerUnavailable
from ..registry import DEFAULT_ENV, load_env
from ._base import fetch_health

__all__ = ["RayProvider", "RayServer", "ServerStatus"]

logger = logging.getLogger("openenv_ws.providers.ray")


def _ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise ServerUnavailable(
            "the Ray provider needs the ray package: pip install 'openenv-ws[ray]'"
        ) from None
    return ray


class _EnvServer:
    """The body of an env-server actor: our server on a thread of the actor's process."""

    def __init__(
        self,
        env: str | EnvFactory,
        host: str | None,
        port: int,
        limits: Any,
        app_options: Mapping[str, Any],
    ) -> None:
        from ..server import ServerLimits, ServerThread, create_app

        ray = _ray_module()

        factory = load_env(env) if isinstance(env, str) else env
        limits = limits or ServerLimits()
        app = create_app(factory, limits=limits, **app_options)
        # In a cluster the node's own address, so that clients on other nodes reach it.
        bind = host or ray.util.get_node_ip_address()
        self._server = ServerThread(app, host=bind, port=port)
        self._server.start()
        self._info = {
            "url": self._server.url,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    def info(self) -> dict[str, Any]:
        return self._info

    def stop(self) -> None:
        self._server.stop()


@dataclass(frozen=True)
class RayServer:
    """One env-server actor: its session endpoint, where it runs, and its handle."""

    url: str
    node_id: str
    pid: int
    actor: Any


@dataclass(frozen=True)
class ServerStatus:
    """What :meth:`RayProvider.status` found for one server."""

    server: RayServer
    alive: bool
    #: Why the actor is gone (Ray's own account), or None while it lives.
    reason: str | None = None


@dataclass(eq=False)
class RayProvider:
    """Start env-server actors on a Ray cluster; their URLs are in :attr:`urls`.

    Args:
        num_servers: actors to start (default: one per ``num_cpus`` CPUs of the cluster).
        env: what the servers host: an installed environment's name (``"atari"``,
            ``"fake"``, see :mod:`openenv_ws.registry`), ``"module:factory"``
            or an :data:`~openenv_ws.environment.EnvFactory` (pickled to the actors).
        host: the address each server binds; None (default) binds the node's IP
            so that other machines reach it, ``"127.0.0.1"`` keeps it on its node.
        port: the port each server binds (0: any free port).
        num_cpus: CPUs Ray reserves per actor (an Atari step holds one core).
        limits: a :class:`~openenv_ws.server.ServerLimits` for every server.
        app_options: more keyword arguments for :func:`~openenv_ws.server.create_app`.
        actor_options: more Ray actor options (``runtime_env``, ``resources``,
            ``scheduling_strategy``, ...); by default actors spread over the nodes.
        startup_timeout: seconds for all actors to serve.
        stop_timeout: seconds each actor gets to stop its server before it is killed.
        init_options: ``ray.init`` keyword arguments, used only when Ray is not
            initialised yet (the provider then shuts Ray down on :meth:`stop`).

    Raises (from :meth:`start`):
        ServerUnavailable: no ray package, an actor failed, or not all started in time.
    """

    num_servers: int | None = None
    _: KW_ONLY
    env: str | EnvFactory = DEFAULT_ENV
    host: str | None = None
    port: int = 0
    num_cpus: float = 1.0
    limits: Any = None
    app_options: Mapping[str, Any] = field(default_factory=dict)
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    startup_timeout: float = 120.0
    stop_timeout: float = 10.0
    init_options: Mapping[str, Any] = field(default_factory=dict)
    #: The running servers, one per actor (empty until :meth:`start`).
    servers: list[RayServer] = field(default_factory=list, init=False)
    _owns_ray: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.num_servers is not None and self.num_servers < 1:
            raise ValueError(f"num_servers must be at least 1, got {self.num_servers}")

    @property
    def urls(self) -> list[str]:
        """The ws:// URLs of the servers' session endpoints, one per actor."""
        if not self.servers:
            raise ServerUnavailable("the Ray servers are not started; call start() first")
        return [server.url for server in self.servers]

    def _count(self, ray: Any) -> int:
        if self.num_servers is not None:
            return self.num_servers
        cpus = float(ray.cluster_resources().get("CPU", 0))
        return max(1, int(cpus // self.num_cpus))

    def start(self) -> RayProvider:
        """Start the actors and wait until each one serves.

        Raises:
            ServerUnavailable: an actor failed to start (the message holds its
                error) or they did not all start within ``startup_timeout``;
                the actors already started are killed.
        """
        if self.servers:
            return self
        ray = _ray_module()
        if not ray.is_initialized():
            ray.init(**self.init_options)
            self._owns_ray = True
        count = self._count(ray)
        options = {
            "num_cpus": self.num_cpus,
            "max_restarts": 0,
            "scheduling_strategy": "SPREAD",
            **self.actor_options,
        }
        actor_class = ray.remote(_EnvServer).options(**options)
        actors = [
            actor_class.remote(self.env, self.host, self.port, self.limits, self.app_options)
            for _ in range(count)
        ]
        try:
            infos = ray.get([actor.info.remote() for actor in actors], timeout=self.startup_timeout)
        except BaseException as exc:
            for actor in actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
            self._release_ray()
            if isinstance(exc, ray.exceptions.GetTimeoutError):
                cpus = ray.cluster_resources().get("CPU", 0) if ray.is_initialized() else "?"
                raise ServerUnavailable(
                    f"{count} env-server actors did not all start within "
                    f"{self.startup_timeout} s; each asks for {self.num_cpus} CPU and the "
                    f"cluster has {cpus}: start fewer (num_servers) or add nodes"
                ) from None
            if isinstance(exc, ray.exceptions.RayError):
                raise ServerUnavailable(f"an env-server actor failed to start: {exc}") from None
            raise
        self.servers = [
            RayServer(info["url"], info["node_id"], info["pid"], actor)
            for info, actor in zip(infos, actors, strict=True)
        ]
        return self

    def health(self, *, timeout: float = 2.0) -> list[dict[str, Any] | None]:
        """Each server's ``/health`` answer (None where it does not answer), asked over HTTP."""
        found = []
        for server in self.servers:
            host, _, port = server.url.removeprefix("ws://").removesuffix("/ws").rpartition(":")
            found.append(fetch_health(host, int(port), timeout=timeout))
        return found

    def status(self, *, timeout: float = 10.0) -> list[ServerStatus]:
        """Ask Ray which actors live; a dead one comes with Ray's reason (e.g. its node died)."""
        ray = _ray_module()
        pending = {server: server.actor.info.remote() for server in self.servers}
        found = []
        for server, ref in pending.items():
            try:
                ray.get(ref, timeout=timeout)
                found.append(ServerStatus(server, True))
            except ray.exceptions.RayActorError as exc:
                found.append(ServerStatus(server, False, _first_line(exc)))
            except ray.exceptions.GetTimeoutError:
                found.append(ServerStatus(server, False, f"no answer within {timeout} s"))
        return found

    def stop(self) -> None:
        """Stop every server (each drains, then its actor is killed). Idempotent."""
        servers, self.servers = self.servers, []
        if servers:
            ray = _ray_module()
            if ray.is_initialized():
                stops = [server.actor.stop.remote() for server in servers]
                with contextlib.suppress(Exception):
                    ray.wait(stops, num_returns=len(stops), timeout=self.stop_timeout)
                for server in servers:
                    with contextlib.suppress(Exception):
                        ray.kill(server.actor)
        self._release_ray()

    def _release_ray(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            _ray_module().shutdown()

    def __enter__(self) -> RayProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # Ray's actor errors open with a generic line; the cause, when known, says "because".
    because = [line for line in lines if " because " in line]
    return (because or lines or [type(exc).__name__])[0]
