"""Where servers come from: a local subprocess (the embedded default), Docker, Ray.

- :class:`LocalServerProvider`: ``openenv-ws serve`` as a subprocess of this process.
- :class:`DockerProvider`: a server image in a container, published on 127.0.0.1
  (extra ``[docker]``).
- :class:`RayProvider`: env-server actors on a Ray cluster, one per CPU, each
  hosting many sessions (extra ``[ray]``).

The Docker and Ray packages are imported only when those providers start.
"""

from __future__ import annotations

from ._base import ServerProvider
from .docker import DockerProvider
from .local import LocalServerProvider
from .ray import RayProvider, RayServer, ServerStatus

__all__ = [
    "DockerProvider",
    "LocalServerProvider",
    "RayProvider",
    "RayServer",
    "ServerProvider",
    "ServerStatus",
]
