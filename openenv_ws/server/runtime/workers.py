"""Several server processes on one port: ``openenv-ws serve --workers N``.

ALE's ``act()`` holds the GIL, so a process steps one environment at a time;
using more cores takes more processes. :func:`run_workers` forks ``N``
workers from a parent that has already imported everything (they share those
pages copy-on-write). Each worker binds its own listening socket to the same
port with ``SO_REUSEPORT``, so the kernel spreads new connections over the
workers; a session then lives in the worker that accepted it.

The parent supervises: it forwards SIGTERM/SIGINT to the workers (each
drains and exits), restarts a worker that dies unexpectedly, and exits when
all workers are gone. Workers die with the parent (``PR_SET_PDEATHSIG``).
A worker that fails before it starts serving (an error while building its
app: every restart would fail the same way), or that dies
:data:`_MAX_DEATHS` times within :data:`_DEATH_WINDOW` seconds, is not
restarted: the parent stops the other workers and exits with status 1.

:class:`WorkerBoard` is a small shared-memory table, one slot per worker,
where each worker publishes its session counts whenever they change; any
worker's ``/health`` reads every slot, so the totals are right whichever
worker answers. Each worker also publishes a snapshot of its Prometheus
metrics there once a second, so that ``/metrics`` gives the whole server's
counts whichever worker answers (see :mod:`openenv_ws.server.runtime.metrics`).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import resource
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import msgpack

__all__ = ["WorkerBoard", "reserve_port", "run_workers"]

logger = logging.getLogger("openenv_ws.server.workers")

_SLOT = struct.Struct("<qqq")  # pid, sessions, opened_total
# A metrics snapshot: sequence number (odd while being written), length, MessagePack bytes.
_METRICS_HEAD = struct.Struct("<qq")
_METRICS_SLOT = 16 << 10
_RESTART_DELAY = 0.5
#: A worker dying this many times within _DEATH_WINDOW seconds ends the server.
_MAX_DEATHS = 5
_DEATH_WINDOW = 60.0


class WorkerBoard:
    """Per-worker session counters in memory shared by forked workers.

    Create it in the parent before forking; each worker sets :attr:`index`
    and calls :meth:`publish`; every worker can :meth:`read` all slots.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers
        self.index: int | None = None
        # Anonymous shared mappings: forked children see the same pages.
        self._mem = mmap.mmap(-1, _SLOT.size * workers)
        self._metrics = mmap.mmap(-1, _METRICS_SLOT * workers)

    def publish(self, sessions: int, opened_total: int) -> None:
        """Record this worker's counts (a no-op outside a worker)."""
        if self.index is not None:
            _SLOT.pack_into(self._mem, self.index * _SLOT.size, os.getpid(), sessions, opened_total)

    def read(self) -> list[dict[str, Any]]:
        """Every worker's last published counts, by worker index."""
        out = []
        for i in range(self.workers):
            pid, sessions, opened = _SLOT.unpack_from(self._mem, i * _SLOT.size)
            out.append({"worker": i, "pid": pid, "sessions": sessions, "opened_total": opened})
        return out

    def health(self) -> dict[str, Any]:
        """The ``/health`` fields: which worker answered, every worker, the totals."""
        workers = self.read()
        return {
            "worker": self.index,
            "workers": workers,
            "sessions_total": sum(w["sessions"] for w in workers),
            "opened_total_all": sum(w["opened_total"] for w in workers),
        }

    def started(self, index: int) -> bool:
        """Whether worker `index` has started serving (published a metrics snapshot)
        since its slot was last cleared."""
        seq: int = _METRICS_HEAD.unpack_from(self._metrics, index * _METRICS_SLOT)[0]
        return seq != 0

    def clear(self, index: int) -> None:
        """Zero a dead worker's slot (done by the parent before restarting it)."""
        _SLOT.pack_into(self._mem, index * _SLOT.size, 0, 0, 0)
        _METRICS_HEAD.pack_into(self._metrics, index * _METRICS_SLOT, 0, 0)

    def publish_metrics(self, snapshot: dict[str, Any]) -> None:
        """Record this worker's metrics snapshot (a no-op outside a worker).

        Raises:
            ValueError: the snapshot does not fit in a slot (16 KiB).
        """
        if self.index is None:
            return
        data = msgpack.packb(snapshot)
        base = self.index * _METRICS_SLOT
        if len(data) > _METRICS_SLOT - _METRICS_HEAD.size:
            raise ValueError(f"a metrics snapshot of {len(data)} bytes does not fit a slot")
        seq = _METRICS_HEAD.unpack_from(self._metrics, base)[0]
        # Odd while writing: a reader that sees it (or a change) reads again.
        _METRICS_HEAD.pack_into(self._metrics, base, seq + 1, len(data))
        start = base + _METRICS_HEAD.size
        self._metrics[start : start + len(data)] = data
        _METRICS_HEAD.pack_into(self._metrics, base, seq + 2, len(data))

    def other_metrics(self) -> list[dict[str, Any]]:
        """The last metrics snapshot of every other worker that published one."""
        out = []
        for i in range(self.workers):
            if i == self.index:
                continue
            base = i * _METRICS_SLOT
            for _ in range(100):
                seq, size = _METRICS_HEAD.unpack_from(self._metrics, base)
                start = base + _METRICS_HEAD.size
                data = bytes(self._metrics[start : start + size])
                if seq % 2 == 0 and _METRICS_HEAD.unpack_from(self._metrics, base)[0] == seq:
                    break
            else:
                continue  # a worker stuck mid-write: left out of this scrape
            if seq:
                out.append(msgpack.unpackb(data))
        return out


def _reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def reserve_port(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """Bind (without listening) a ``SO_REUSEPORT`` socket: the port the workers will share.

    Keep it open while the workers run: with port 0 it holds the port the OS
    picked. Not listening, it takes no connections itself.
    """
    if not hasattr(socket, "SO_REUSEPORT"):  # pragma: no cover - Linux and BSDs have it
        raise OSError("--workers needs SO_REUSEPORT, which this platform lacks")
    return _reuseport_socket(host, port)


def _raise_open_file_limit() -> None:
    # Each session is a socket; the soft limit (often 1024) would cap a worker's sessions.
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_workers(
    workers: int,
    serve: Callable[[socket.socket, int], None],
    *,
    host: str,
    port: int,
    board: WorkerBoard | None = None,
    backlog: int = 2048,
) -> int:
    """Fork `workers` processes that each run ``serve(listening_socket, index)``.

    Args:
        workers: number of processes.
        serve: runs one worker's server on its socket until it is told to stop
            (SIGTERM/SIGINT); called in the child.
        host, port: where to listen (the port already reserved with :func:`reserve_port`).
        board: the shared counters; its ``index`` is set in each child.
        backlog: listen backlog of each worker's socket.

    Returns:
        The exit status for the parent: 0 after a requested shutdown, 1 when a
        worker failed at start or kept dying (the others are stopped).
    """
    children: dict[int, int] = {}  # pid -> worker index
    deaths: dict[int, list[float]] = {}  # worker index -> times it died, recent ones
    stopping = False
    status = 0

    def spawn(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with_parent()
                if os.getppid() == 1:  # the parent died before the line above
                    os._exit(0)
                _raise_open_file_limit()
                if board is not None:
                    board.index = index
                    board.publish(0, 0)
                sock = _reuseport_socket(host, port)
                sock.listen(backlog)
                sock.set_inheritable(False)
                serve(sock, index)
                code = 0
            except BaseException:  # report, then leave without running the parent's cleanup
                logger.exception("worker %d failed", index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = index

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for index in range(workers):
            spawn(index)
        while children:
            try:
                pid, wait_status = os.wait()
            except ChildProcessError:
                break
            if pid not in children:
                continue
            index = children.pop(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            started = board is None or board.started(index)
            if board is not None:
                board.clear(index)
            if stopping:
                continue
            now = time.monotonic()
            recent = [t for t in deaths.get(index, []) if now - t < _DEATH_WINDOW] + [now]
            deaths[index] = recent
            problem = None
            if code > 0 and not started:
                problem = f"exited with status {code} before it started serving"
            elif len(recent) >= _MAX_DEATHS:
                problem = f"died {len(recent)} times within {_DEATH_WINDOW:g} s"
            if problem is not None:
                logger.error(
                    "worker %d (pid %d) %s; stopping the server (the worker's error is above)",
                    index,
                    pid,
                    problem,
                )
                status = 1
                stop(signal.SIGTERM, None)
                continue
            logger.warning(
                "worker %d (pid %d) exited with status %d; restarting it", index, pid, code
            )
            time.sleep(_RESTART_DELAY)
            if not stopping:
                spawn(index)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
