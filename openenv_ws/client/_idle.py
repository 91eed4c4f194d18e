"""Heartbeats of blocking connections while their owner is busy elsewhere.

A blocking client reads its socket only during a call. Between calls (a
training update, an evaluation, a pause at a breakpoint) nobody would answer
the server's heartbeat pings, and the server would drop a connection whose
process is alive. One daemon thread per process, the keeper, answers them
instead, only while a connection is idle:

- each connection has a :class:`CallGuard`: the caller holds its lock for a
  whole call and counts the call; the keeper reads only with that lock held
  and only when the count has not moved for a whole tick, so it never reads
  while a call is in progress and never wakes for the replies of a busy loop;
- the step path pays for an uncontended lock and a counter, nothing else: no
  wake-up, no system call;
- what the keeper reads is handled as a call would handle it: pings are
  answered, a close frame closes the connection, and messages (a late reply,
  the server's last error) wait for the next call
  (:meth:`BlockingWebSocket.serve_idle`).

A ping is answered within two ticks (:data:`TICK`), far inside any sensible
``--ping-timeout``; the server's ``--idle-timeout`` still ends sessions that
send no request, as documented.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
import time
import weakref
from typing import TYPE_CHECKING, Protocol

from ..errors import OpenEnvError

if TYPE_CHECKING:
    from ._core import ClientCore

__all__ = ["TICK", "CallGuard", "Kept", "keep_alive", "read_last_words"]

logger = logging.getLogger("openenv_ws.client")

#: Seconds between the keeper's looks at its connections.
TICK = 0.25


class CallGuard:
    """Who reads a connection: its caller during a call, the keeper between calls.

    A caller wraps each call as::

        guard.lock.acquire()
        guard.calls += 1
        try:
            ...  # send, read the reply
        finally:
            guard.lock.release()

    Several connections driven together (a vector client) may share one guard.
    """

    __slots__ = ("calls", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0


class Kept(Protocol):
    """What the keeper needs of a connection (:class:`~._ws.BlockingWebSocket` is one)."""

    @property
    def guard(self) -> CallGuard: ...

    @property
    def closed(self) -> bool: ...

    @property
    def url(self) -> str: ...

    def fileno(self) -> int: ...

    def serve_idle(self) -> None: ...

    def take_unclaimed(self) -> list[bytes]: ...


class _Keeper:
    """The thread that serves the idle connections of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: weakref.WeakSet[Kept] = weakref.WeakSet()
        self._thread: threading.Thread | None = None

    def watch(self, ws: Kept) -> None:
        with self._lock:
            self._watched.add(ws)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="openenv-ws-heartbeat", daemon=True
                )
                self._thread.start()

    def forget_all(self) -> None:
        """In a forked child: the parent's thread and connections are not ours."""
        self._lock = threading.Lock()
        self._watched = weakref.WeakSet()
        self._thread = None

    def _run(self) -> None:
        seen: weakref.WeakKeyDictionary[Kept, int] = weakref.WeakKeyDictionary()
        served: weakref.WeakKeyDictionary[Kept, int] = weakref.WeakKeyDictionary()
        while True:
            with self._lock:
                conns = [ws for ws in self._watched if not ws.closed]
                if not conns:
                    self._thread = None
                    return
            idle = []
            for ws in conns:
                calls = ws.guard.calls
                if seen.get(ws) == calls and not ws.guard.lock.locked():
                    idle.append(ws)
                seen[ws] = calls
            del conns
            if not idle:
                time.sleep(TICK)
                continue
            # A connection that has just become idle is read once whatever the
            # socket says: the last call may have left a ping in its buffer.
            fresh = [ws for ws in idle if served.get(ws) != seen[ws]]
            for ws in fresh:
                _serve(ws, seen[ws])
                served[ws] = seen[ws]
            for ws in _readable([ws for ws in idle if ws not in fresh], TICK):
                _serve(ws, seen[ws])
            del idle, fresh


def _readable(conns: list[Kept], timeout: float) -> list[Kept]:
    """The connections among `conns` whose sockets become readable within `timeout` s."""
    if not conns:
        time.sleep(timeout)
        return []
    with selectors.DefaultSelector() as selector:
        for ws in conns:
            try:
                selector.register(ws.fileno(), selectors.EVENT_READ, ws)
            except (OSError, ValueError):
                continue  # closed meanwhile; the next round drops it
        if not selector.get_map():
            return []
        return [key.data for key, _ in selector.select(timeout)]


def _serve(ws: Kept, calls: int) -> None:
    guard = ws.guard
    if not guard.lock.acquire(blocking=False):
        return  # a call has just started: it reads the socket itself
    try:
        if guard.calls == calls and not ws.closed:
            ws.serve_idle()
    except Exception as exc:  # noqa: BLE001 - the next call reports the closed connection
        logger.debug("idle connection to %s ended: %s", ws.url, exc)
    finally:
        guard.lock.release()


_keeper = _Keeper()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keeper.forget_all)


def keep_alive(ws: Kept) -> None:
    """Answer `ws`'s heartbeat pings whenever no call is using it, until it closes."""
    _keeper.watch(ws)


def read_last_words(ws: Kept, core: ClientCore) -> None:
    """Check what the keeper kept from a connection that has closed since: a fatal
    error among it (the server's idle timeout, a drain) becomes ``core.closed_error``,
    which then tells the user why the session ended."""
    for message in ws.take_unclaimed():
        with contextlib.suppress(OpenEnvError):
            core.check(core.decode(message))
