"""openenv-ws benchmark suite: scenarios measured side by side with in-process ALE and peers.

Run it with ``openenv-ws bench`` (or ``python -m benchmarks``); ``--list``
shows the scenarios and which ones this build can run. New scenarios register
themselves with :func:`benchmarks.suite.scenario` in a module imported by
:mod:`benchmarks.scenarios`.
"""

from __future__ import annotations

from .runner import main

__all__ = ["main"]
