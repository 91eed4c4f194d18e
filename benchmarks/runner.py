"""``openenv-ws bench``: run the scenarios, show progress, write the report."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import scenarios as _scenarios  # noqa: F401 - registers the scenarios
from .hostile.harness import PHASES as HOSTILE_PHASES
from .measure import cpu_model
from .report import section_markdown, write_run
from .suite import SCENARIOS, Context, Options, Progress, Section, ints, split_list

__all__ = ["ORDER", "build_parser", "main", "run"]

#: Report order; scenarios registered later (new modules) come after these.
ORDER = ("latency", "openenv", "throughput", "open", "memory", "http", "docker", "ray")

DEFAULT_OUT = Path("benchmarks/results/latest")


def build_parser(prog: str = "openenv-ws bench") -> argparse.ArgumentParser:
    """The options of ``openenv-ws bench`` (also ``python -m benchmarks``)."""
    d = Options()
    p = argparse.ArgumentParser(
        prog=prog,
        description="Benchmark openenv-ws against in-process ALE and OpenEnv; "
        "writes report.md, report.json, samples.json and PNG plots to --out.",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder ({DEFAULT_OUT})")
    p.add_argument(
        "--scenarios",
        default="default",
        help="comma list of scenarios to run, 'default' (the headline comparisons: "
        f"{', '.join(_defaults())}) or 'all' (--list shows every one)",
    )
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--steps", type=int, default=d.steps, help="steps per latency measurement")
    p.add_argument(
        "--sessions",
        default=",".join(map(str, d.sessions)),
        help="session counts for the throughput curve",
    )
    p.add_argument("--games", default=",".join(d.games), help="comma list of games")
    p.add_argument("--obs-types", default=",".join(d.obs_types), help="rgb, grayscale, ram")
    p.add_argument(
        "--clients",
        default=",".join(d.clients),
        help="sync, sync-socket (no shared memory), async, "
        "sync-poll (client and server busy-poll; split placement only)",
    )
    p.add_argument(
        "--placement",
        default=",".join(d.placements),
        help="split (server and client on different cores), shared (same core), any (OS "
        "decides); the latency and OpenEnv scenarios measure each, the others use the first",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--rounds", type=int, default=d.rounds, help="rounds per latency point (best kept)"
    )
    p.add_argument(
        "--open-count", type=int, default=d.open_count, help="sessions opened per open-time point"
    )
    p.add_argument(
        "--memory-sessions",
        type=int,
        default=d.memory_sessions,
        help="sessions for the memory scenario",
    )
    p.add_argument(
        "--peer-steps", type=int, default=d.peer_steps, help="steps through each peer WebSocket"
    )
    p.add_argument(
        "--peer-http-steps",
        type=int,
        default=d.peer_http_steps,
        help="calls to the peer's HTTP /step",
    )
    p.add_argument(
        "--vector-envs",
        type=int,
        default=d.vector_envs,
        help="sessions of the vector and frame-cache scenarios",
    )
    p.add_argument(
        "--rollout-envs",
        default=",".join(map(str, d.rollout_envs)),
        help="env counts N of the rollout scenario (send/recv batches of N/2)",
    )
    p.add_argument(
        "--rollout-seconds",
        type=float,
        default=d.rollout_seconds,
        help="timed seconds per row of the rollout scenario (plus a quarter of that to warm up)",
    )
    p.add_argument(
        "--hostile-seconds",
        type=float,
        default=d.hostile_seconds,
        help="seconds per phase of the hostile scenario (its never-read flood: twice that)",
    )
    p.add_argument(
        "--slowloris",
        type=int,
        default=d.slowloris,
        help="connections of the hostile scenario's slowloris and TLS idle phases",
    )
    p.add_argument(
        "--hostile-phases",
        default=d.hostile_phases,
        help="comma list of the hostile scenario's phases to run after its baseline, in "
        f"that order, or 'all' ({', '.join(HOSTILE_PHASES)})",
    )
    p.add_argument(
        "--hostile-heavy",
        type=int,
        default=d.hostile_heavy,
        help="sessions of the hostile scenario's heavy phase",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def _ordered() -> list[str]:
    known = [n for n in ORDER if n in SCENARIOS]
    return known + [n for n in SCENARIOS if n not in known]


def _defaults() -> list[str]:
    return [n for n in _ordered() if SCENARIOS[n].default]


def options_from(args: argparse.Namespace) -> Options:
    if args.scenarios in ("all", "default"):
        chosen = _ordered() if args.scenarios == "all" else _defaults()
    else:
        chosen = split_list(args.scenarios)
    unknown = [n for n in chosen if n not in SCENARIOS]
    if unknown:
        raise SystemExit(
            f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(_ordered())}"
        )
    phases = [p for p in split_list(args.hostile_phases) if p not in ("all", "baseline")]
    if [p for p in phases if p not in HOSTILE_PHASES]:
        raise SystemExit(
            f"unknown hostile phase(s) in {args.hostile_phases!r}; choose from "
            f"{', '.join(HOSTILE_PHASES)} or all"
        )
    counts = (("--steps", args.steps), ("--open-count", args.open_count))
    for name, value in (*counts, ("--hostile-heavy", args.hostile_heavy)):
        if value < 1:
            raise SystemExit(f"{name} must be at least 1, got {value}")
    return Options(
        out=args.out,
        steps=args.steps,
        sessions=ints(split_list(args.sessions)),
        games=tuple(split_list(args.games)),
        obs_types=tuple(split_list(args.obs_types)),
        clients=tuple(split_list(args.clients)),
        placements=tuple(split_list(args.placement)),
        scenarios=tuple(chosen),
        seed=args.seed,
        rounds=args.rounds,
        open_count=args.open_count,
        memory_sessions=args.memory_sessions,
        peer_steps=args.peer_steps,
        peer_http_steps=args.peer_http_steps,
        vector_envs=args.vector_envs,
        rollout_envs=ints(split_list(args.rollout_envs)),
        rollout_seconds=args.rollout_seconds,
        hostile_seconds=args.hostile_seconds,
        slowloris=args.slowloris,
        hostile_phases=args.hostile_phases,
        hostile_heavy=args.hostile_heavy,
        plots=not args.no_plots,
    )


class RichProgress(Progress):
    """Progress bars with rich: one bar per scenario, its current phase as the label.

    Redrawn only when a phase starts: rich's own refresh thread would take the
    interpreter lock from the measuring client every 100 ms (a client that
    busy-polls held it back for milliseconds at a time).
    """

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bars

        self.console = Console(stderr=True)
        self.bars = Bars(
            TextColumn("{task.fields[title]:<42}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=False,
            auto_refresh=False,
        )
        self.bars.start()
        self.task: Any = None
        self.started = False

    def start(self, title: str, total: int) -> None:
        self.task = self.bars.add_task("", total=total, title=title)
        self.started = False

    def phase(self, label: str) -> None:
        if self.task is None:
            return
        if self.started:
            self.bars.advance(self.task)
        self.started = True
        self.bars.update(self.task, description=label)
        self.bars.refresh()

    def log(self, message: str) -> None:
        self.bars.console.print(message)

    def stop(self) -> None:
        if self.task is not None:
            total = self.bars.tasks[-1].total or 0
            self.bars.update(self.task, completed=total, description="done")
            self.bars.refresh()
            self.task = None

    def close(self) -> None:
        self.bars.stop()


def machine() -> dict[str, Any]:
    """Where the run happened (goes into the report header)."""
    versions = {}
    for dist in ("openenv-ws", "ale-py", "numpy", "uvicorn", "websockets", "openenv-core"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": sorted(os.sched_getaffinity(0)),
        "memory_gb": pages / (1 << 30),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions,
    }


def run(options: Options, progress: Progress, command: str) -> tuple[dict[str, Any], list[Section]]:
    """Run the chosen scenarios; a pending or failing one becomes a section saying so."""
    ctx = Context(options, progress)
    sections: list[Section] = []
    started = time.time()
    for name in options.scenarios:
        entry = SCENARIOS[name]
        missing = entry.missing()
        if missing is not None:
            sections.append(Section(name, entry.title, status="pending", reason=missing))
            progress.log(f"{entry.title}: {missing}")
            continue
        try:
            section = entry.run(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others
            progress.log(f"{entry.title} failed:\n{traceback.format_exc()}")
            section = Section(
                name, entry.title, status="failed", reason=f"{type(exc).__name__}: {exc}"
            )
        finally:
            progress.stop()
        sections.append(section)
    info = {
        "suite": "openenv-ws bench",
        "format": 1,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(
            timespec="seconds"
        ),
        "duration_s": time.time() - started,
        "command": command,
        "machine": machine(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(options).items()},
    }
    return info, sections


def main(argv: Sequence[str] | None = None, prog: str = "openenv-ws bench") -> int:
    """Entry point of ``openenv-ws bench``; returns 1 if a scenario failed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    if args.list:
        for name in _ordered():
            entry = SCENARIOS[name]
            state = entry.missing() or "ready"
            when = "default" if entry.default else "when named"
            print(f"{name:<13} {entry.doc}\n{'':<13} [{state}; {when}]")
        return 0
    options = options_from(args)
    command = " ".join([prog, *map(shlex.quote, argv)])
    try:
        progress: Progress = RichProgress()
    except ImportError:
        progress = Progress()
    try:
        info, sections = run(options, progress, command)
    finally:
        if isinstance(progress, RichProgress):
            progress.close()
    files = write_run(options.out, info, sections, options.plots)
    for section in sections:
        print(section_markdown(section))
    print("wrote " + ", ".join(str(f) for f in files))
    return 1 if any(s.status == "failed" for s in sections) else 0
