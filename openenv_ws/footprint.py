"""What a session takes from its server process before it is built: memory and threads.

A server admits every session against process-wide budgets (SPEC section 9):
bytes of memory and engine threads. An environment plugin says what a
session of a given config will take (``EnvPlugin.footprint``), computed from
the config alone, without building anything; the server adds up the
footprints of the sessions it hosts and refuses an ``open`` that would take
it past a budget with ``capacity`` naming the budget. A plugin that says
nothing is charged :data:`DEFAULT_FOOTPRINT` per session (per env of a
vector session).

Estimates err on the high side: they are measured resident memory after a
reset and a few steps, plus the reply being encoded, not the arrays alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_FOOTPRINT",
    "MIB",
    "Footprint",
    "FootprintFunction",
    "default_memory_budget",
    "default_thread_budget",
    "map_large_buffers",
    "physical_memory",
    "session_footprint",
]

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one session takes.

    Attributes:
        bytes: memory the session holds while it runs (its environment or
            envs, their frame buffers and stacks, the reply being encoded).
        threads: threads the session's engine starts beside its own worker
            (a vector engine's C++ threads); 0 for a plain environment.
    """

    bytes: int
    threads: int = 0

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(self.bytes + other.bytes, self.threads + other.threads)

    def times(self, count: int) -> Footprint:
        """`count` such sessions (the envs of a vector session)."""
        return Footprint(self.bytes * count, self.threads * count)


#: Charged per session (per env) of a plugin that declares no footprint: a Python
#: environment with a few small arrays (a Gymnasium classic-control task is ~1 MB).
DEFAULT_FOOTPRINT = Footprint(16 * MIB)

#: ``footprint(config, num_envs, batch_size)``: num_envs None for a single session.
#: Raises :class:`~openenv_ws.errors.EnvConfigError` for a config the plugin refuses.
FootprintFunction = Callable[[Mapping[str, Any], "int | None", "int | None"], Footprint]


def physical_memory() -> int:
    """This machine's physical memory in bytes (0 when it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


#: Share of physical memory the sessions of one server may take, by default.
MEMORY_SHARE = 0.5
#: Used where physical memory cannot be read.
_FALLBACK_MEMORY = 8 << 30


def default_memory_budget(workers: int = 1) -> int:
    """Bytes the sessions of one server process may take: half of physical memory,
    split between its worker processes (12 GiB for one process on a 24 GiB machine)."""
    total = physical_memory() or _FALLBACK_MEMORY
    return int(total * MEMORY_SHARE) // max(1, workers)


def default_thread_budget() -> int:
    """Engine threads the sessions of one process may start: 32 per core (64 on 2 cores)."""
    return 32 * (os.cpu_count() or 1)


def session_footprint(
    factory: Any, config: Mapping[str, Any], num_envs: int | None, batch_size: int | None
) -> Footprint:
    """What a session of `config` made by `factory` takes (`num_envs` None: a single one).

    Uses the factory's ``footprint`` (an ``EnvPlugin``'s, or a warm pool's
    forwarding it); a vector session of a factory with no vector engine is
    `num_envs` single sessions.

    Raises:
        EnvConfigError: a config the plugin refuses.
    """
    estimate: FootprintFunction | None = getattr(factory, "footprint", None)
    if estimate is None:
        return DEFAULT_FOOTPRINT if num_envs is None else DEFAULT_FOOTPRINT.times(num_envs)
    if num_envs is not None and getattr(factory, "vector", None) is None:
        return estimate(config, None, None).times(num_envs)
    return estimate(config, num_envs, batch_size)


#: Allocations at least this large get pages of their own (see :func:`map_large_buffers`).
LARGE_BUFFER = 8 << 20
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def map_large_buffers() -> bool:
    """Have glibc map every allocation of :data:`LARGE_BUFFER` bytes or more on its own
    pages, returned to the system when freed; True if it was set.

    glibc raises its threshold for that after the first large buffer is freed, so
    later frames of that size come from the heap of whichever thread made them
    and stay resident after their session ends: a server serving 16 MiB
    observations from its sessions' threads held about twice their footprint.
    With a fixed threshold it holds what the sessions use. Buffers below it (an
    RGB Atari screen is 100 KB, a batch of 64 of them 6.4 MB) come from the heap
    as before: mapping each would cost page faults on every step.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, LARGE_BUFFER))
