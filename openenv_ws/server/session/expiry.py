"""Idle expiry: the one mechanism that ends what waited too long, for every kind of session.

A server process has one :class:`Expiry`. Whatever may expire registers a
*check* under a key with the time to run it (the event loop's clock): the
WebSocket connections (one check sweeps them all: idle and open timeouts,
see :class:`~openenv_ws.server.session.supervisor.Supervisor`), each parked session
(its resume grace period, see :class:`~openenv_ws.server.session.resume.ResumeStore`)
and the HTTP sessions, the fallback's and OpenEnv's (one check for the
least recently used, see :class:`~openenv_ws.server.routes.fallback.HTTPSessionStore`).
A check returns when to run it again, or None when it is done.

Nothing is done per request: activity is recorded where it is cheap (a
counter, a time) and the check reads it when its time comes. One timer
handle of the loop waits for the earliest check.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable

__all__ = ["Check", "Expiry"]

logger = logging.getLogger("openenv_ws.server")

#: Called with the loop time once its time came; returns when to run it again, or None.
Check = Callable[[float], float | None]


class Expiry:
    """Checks keyed by what they watch, each run at its time, with one timer for the earliest.

    Every method is called on the event loop's thread.
    """

    def __init__(self) -> None:
        self._checks: dict[Hashable, tuple[int, Check]] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def __contains__(self, key: Hashable) -> bool:
        return key in self._checks

    def __len__(self) -> int:
        return len(self._checks)

    def at(self, key: Hashable, when: float, check: Check) -> None:
        """Run `check` at loop time `when` (replacing what `key` had)."""
        seq = next(self._seq)
        self._checks[key] = (seq, check)
        heapq.heappush(self._heap, (when, seq, key))
        if when < self._timer_at:
            self._arm()

    def after(self, key: Hashable, delay: float, check: Check) -> None:
        """Run `check` in `delay` seconds (replacing what `key` had)."""
        self.at(key, asyncio.get_running_loop().time() + delay, check)

    def cancel(self, key: Hashable) -> None:
        """Forget `key`'s check (idempotent)."""
        self._checks.pop(key, None)

    def close(self) -> None:
        """Forget every check and stop the timer (the server stops)."""
        self._checks.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = float("inf")

    def _arm(self) -> None:
        heap, checks = self._heap, self._checks
        while heap and checks.get(heap[0][2], (None,))[0] != heap[0][1]:
            heapq.heappop(heap)  # cancelled or replaced
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not heap:
            self._timer_at = float("inf")
            return
        self._timer_at = heap[0][0]
        self._timer = asyncio.get_running_loop().call_at(self._timer_at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        now = asyncio.get_running_loop().time()
        heap, checks = self._heap, self._checks
        due: list[tuple[Hashable, Check]] = []
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            entry = checks.get(key)
            if entry is not None and entry[0] == seq:
                del checks[key]
                due.append((key, entry[1]))
        for key, check in due:
            try:
                again = check(now)
            except Exception:
                logger.exception("idle expiry check %r failed", key)
                continue
            if again is not None and key not in checks:
                seq = next(self._seq)
                checks[key] = (seq, check)
                heapq.heappush(heap, (again, seq, key))
        self._arm()
