"""Process helpers for the provider tests (Linux /proc)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..conftest import UNIT


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pid: int, timeout: float = 30 * UNIT) -> bool:
    """Wait until `pid` is gone; False if it still runs after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def children(pid: int | None = None) -> set[int]:
    """The live child processes of `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found  # it has just ended
    for task in tasks:
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return {c for c in found if alive(c)}


def descendants(pid: int | None = None) -> set[int]:
    """All live processes below `pid` (default: this process)."""
    found: set[int] = set()
    todo = [os.getpid() if pid is None else pid]
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
