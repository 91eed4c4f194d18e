"""The scenario registry and the data every scenario reports.

A scenario is a function ``run(ctx) -> Section`` registered with
:func:`scenario`. Scenarios that depend on a part of the runtime that may be
missing from a build (the vector client, the HTTP fallback, the Docker and
Ray providers, a peer package) pass ``requires``: a callable returning None
when the part is there, or a sentence saying what is missing. The runner
then records the scenario as *pending* with that sentence instead of running it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .measure import Placement, Workload

__all__ = [
    "SCENARIOS",
    "Column",
    "Context",
    "Options",
    "Scenario",
    "Section",
    "has_attr",
    "scenario",
    "two_cores",
]


@dataclass
class Options:
    """What to measure and how much (``openenv-ws bench --help`` documents each)."""

    out: Path = Path("benchmarks/results/latest")
    steps: int = 2000
    sessions: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 256)
    games: tuple[str, ...] = ("pong",)
    obs_types: tuple[str, ...] = ("rgb", "grayscale", "ram")
    clients: tuple[str, ...] = ("sync", "sync-socket", "async", "sync-poll")
    placements: tuple[str, ...] = ("split", "shared")
    scenarios: tuple[str, ...] = ()
    seed: int = 0
    rounds: int = 3
    open_count: int = 20
    memory_sessions: int = 64
    peer_steps: int = 500
    peer_http_steps: int = 30
    vector_envs: int = 16
    rollout_envs: tuple[int, ...] = (8, 32)
    rollout_seconds: float = 4.0
    hostile_seconds: float = 30.0
    slowloris: int = 5000
    hostile_phases: str = "all"
    hostile_heavy: int = 20
    plots: bool = True


@dataclass(frozen=True)
class Column:
    """A table column: the row key, its header and a format for numbers."""

    key: str
    header: str
    fmt: str = ""

    def render(self, value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, float) and self.fmt:
            return format(value, self.fmt)
        return str(value)


@dataclass
class Section:
    """One scenario's results: a table plus notes and raw samples for the plots.

    ``status`` is ``ok``, ``pending`` (a needed part is missing; ``reason``
    says which) or ``failed`` (``reason`` holds the error).
    """

    name: str
    title: str
    columns: list[Column] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = "ok"
    reason: str = ""
    #: obs type -> path label -> per-step latencies in seconds (latency distribution plot).
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    #: series label -> [(sessions, steps/s)] (throughput plot); "in-process" is the reference line.
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, **row: Any) -> dict[str, Any]:
        self.rows.append(row)
        return row

    def sample(self, obs_type: str, label: str, seconds: Any) -> None:
        """Keep per-step latencies (a sequence or array of seconds) for the plots."""
        self.samples.setdefault(obs_type, {})[label] = [float(s) for s in seconds]


@dataclass(frozen=True)
class Scenario:
    """A registered scenario."""

    name: str
    title: str
    run: Callable[[Context], Section]
    requires: Callable[[], str | None]
    doc: str
    #: Part of a plain ``openenv-ws bench`` run; the others run when named (or with ``all``).
    default: bool = True

    def missing(self) -> str | None:
        """None when the scenario can run, else what it waits for."""
        return self.requires()


SCENARIOS: dict[str, Scenario] = {}


def _always() -> str | None:
    return None


def scenario(
    name: str,
    title: str,
    *,
    requires: Callable[[], str | None] = _always,
    default: bool = True,
) -> Callable[[Callable[[Context], Section]], Callable[[Context], Section]]:
    """Register ``run(ctx) -> Section`` under `name` (the ``--scenarios`` key).

    `default`: part of a plain ``openenv-ws bench`` run (the headline
    comparisons); the others (long or special-purpose) run when named.
    """

    def register(run: Callable[[Context], Section]) -> Callable[[Context], Section]:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} is registered twice")
        doc = (run.__doc__ or title).strip().splitlines()[0]
        SCENARIOS[name] = Scenario(name, title, run, requires, doc, default)
        return run

    return register


def has_attr(module: str, attr: str, what: str) -> Callable[[], str | None]:
    """A ``requires`` check: `module` must import and define `attr`."""

    def check() -> str | None:
        try:
            if importlib.util.find_spec(module) is None:
                raise ImportError(module)
            found = hasattr(importlib.import_module(module), attr)
        except ImportError:
            found = False
        return None if found else f"{what} ({module}.{attr}) is not in this build"

    return check


def two_cores() -> str | None:
    """A ``requires`` check: the scenario pins a server and a client to two different cores."""
    if len(os.sched_getaffinity(0)) < 2:
        return "it needs two usable cores (server on one, client on the other)"
    return None


class Context:
    """What a scenario gets: the options, workloads, servers and progress reporting."""

    def __init__(self, options: Options, progress: Progress) -> None:
        self.options = options
        self.progress = progress

    def workload(self, game: str, obs_type: str, steps: int | None = None) -> Workload:
        """The same game, options, seed and action sequence for every contender."""
        from .measure import Workload

        return Workload.make(game, obs_type, self.options.seed, steps or self.options.steps)

    def placements(self) -> list[Placement]:
        from .measure import Placement

        return [Placement.named(name) for name in self.options.placements]

    def workloads(self) -> Iterator[Workload]:
        for game in self.options.games:
            for obs_type in self.options.obs_types:
                yield self.workload(game, obs_type)


class Progress:
    """Progress reporting: phases of the running scenario (rich when available)."""

    def start(self, title: str, total: int) -> None:
        """A scenario with `total` phases begins."""

    def phase(self, label: str) -> None:
        """The next phase, named `label`, begins (the previous one is done)."""

    def log(self, message: str) -> None:
        print(message, flush=True)

    def stop(self) -> None:
        """The scenario ended."""


def split_list(value: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in value.split(",") if item.strip()]


def ints(values: Sequence[str]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)
