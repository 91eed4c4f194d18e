"""The TLS phase's server: ``openenv-ws serve --certfile/--keyfile`` on 127.0.0.1 with a
certificate of a throwaway CA (trustme), under a descriptor limit of its own.

The limit (soft and hard, set before the server starts, so that the server
sizes its connection caps to it) is below the attack's connection count: a
server that counts a TLS connection only once its handshake is done runs out
of descriptors, one that counts and evicts from accept does not.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from ..measure import Placement
from ..servers import PeerServer, tls_files

__all__ = ["tls_server"]

# Runs the command after it (argv[2:]) with RLIMIT_NOFILE argv[1] (soft and hard; at most
# the hard limit this process has, which an unprivileged process cannot raise).
_LIMITED = (
    "import os, resource, sys\n"
    "n, hard = int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
    "n = n if hard == resource.RLIM_INFINITY else min(n, hard)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


@contextlib.contextmanager
def tls_server(placement: Placement, nofile: int | None) -> Iterator[tuple[PeerServer, str]]:
    """(the server, its CA bundle's path) until the block ends.

    Raises:
        RuntimeError: trustme is not installed.
        PeerUnavailable: the server did not start.
    """
    with contextlib.ExitStack() as stack:
        files = stack.enter_context(tls_files("127.0.0.1"))
        if files is None:
            raise RuntimeError("trustme is not installed (pip install trustme)")
        chain, key, ca = files
        prefix = [sys.executable, "-c", _LIMITED, str(nofile)] if nofile else []
        args = ["serve", "--host", "127.0.0.1", "--port", "0", "--env", "atari"]
        args += ["--pool-size", "0", "--certfile", chain, "--keyfile", key]
        server = PeerServer(
            "openenv_ws", env={}, placement=placement, args=args, prefix=prefix, ca_file=ca
        )
        yield stack.enter_context(server), ca
