"""Steps/s through a Docker-published port and through Ray actors, next to the local server.

Every row plays the same game, options, seed and actions; the reference is
:class:`atari.AtariEnvironment` stepped in this process, measured in the same run.

    python benchmarks/bench_providers.py --steps 3000 --sessions 1,4 --image openenv-ws/atari:ci

Rows, for each session count N:

- ``in-process``: N environments stepped one after another in this process (the reference);
- ``local server``: one ``openenv-ws serve`` subprocess (:class:`LocalServerProvider`);
- ``Docker port``: the image's server through its 127.0.0.1-published port
  (:class:`DockerProvider`; the image is built by ``.ci/lib/build-image.sh``);
- ``Ray actors``: :class:`RayProvider` servers on a local Ray instance, one per CPU,
  the sessions spread over them.

One session is an :class:`EnvClient` step loop; N sessions are one
:class:`VectorEnvClient` stepping all N per call. A path that cannot run here
(no engine, no image, no ray package) gets a row saying why. ``run()`` returns
the rows for use by the benchmark suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import Workload, inprocess_steps, latency_row
from benchmarks.scenarios.latency import sync_steps
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import DockerProvider, LocalServerProvider, RayProvider

__all__ = ["PATHS", "main", "run"]

PATHS = ("local", "docker", "ray")
#: Ray on loopback only, without usage reports or a token file in the home folder.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
}


def vector_steps_per_s(urls: Sequence[str], work: Workload, sessions: int) -> float:
    """Environment steps per second of one VectorEnvClient stepping `sessions` envs together."""
    with VectorEnvClient(list(urls), sessions, config=work.config) as envs:
        envs.reset(seed=work.seed)
        for action in work.warmup:
            envs.step(np.full(sessions, action))
        start = time.perf_counter()
        for action in work.actions:
            envs.step(np.full(sessions, action))
        return sessions * len(work.actions) / (time.perf_counter() - start)


def measure(urls: Sequence[str], work: Workload, sessions: int, rounds: int = 1) -> float:
    """Steps/s, the best of `rounds` runs (other load on the machine only ever slows a run)."""
    if sessions == 1:
        return max(latency_row(sync_steps(urls[0], work))["steps_per_s"] for _ in range(rounds))
    return max(vector_steps_per_s(urls, work, sessions) for _ in range(rounds))


@contextlib.contextmanager
def local_ray(cpus: int | None) -> Iterator[RayProvider]:
    """RayProvider servers (127.0.0.1) on a Ray instance of this machine, shut down after."""
    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # its socket paths must stay short
    os.environ.update(RAY_ENV, RAY_TMPDIR=folder)
    init = {
        "address": "local",
        "num_cpus": cpus or os.cpu_count() or 1,
        "include_dashboard": False,
        "_temp_dir": folder,
        "log_to_driver": False,
    }
    try:
        with RayProvider(env="atari", host="127.0.0.1", init_options=init) as servers:
            yield servers
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(
    work: Workload,
    sessions: Sequence[int] = (1,),
    *,
    paths: Sequence[str] = PATHS,
    image: str = "openenv-ws/atari:ci",
    ray_cpus: int | None = None,
    rounds: int = 1,
    say: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Measure every path for every session count (best of `rounds`); one dict per row."""
    rows: list[dict[str, Any]] = []
    reference = {
        n: max(latency_row(inprocess_steps(work))["steps_per_s"] for _ in range(rounds))
        for n in sessions
    }
    for n in sessions:
        rows.append({"path": "in-process", "sessions": n, "steps_per_s": reference[n]})

    def add(path: str, urls: Sequence[str], note: str) -> None:
        for n in sessions:
            say(f"{path}, {n} session(s)")
            value = measure(urls, work, n, rounds)
            local = next(
                (
                    r["steps_per_s"]
                    for r in rows
                    if r["path"] == "local server" and r["sessions"] == n
                ),
                None,
            )
            rows.append(
                {
                    "path": path,
                    "sessions": n,
                    "steps_per_s": value,
                    "vs_inprocess": value / reference[n],
                    "vs_local": value / local
                    if local
                    else (1.0 if path == "local server" else None),
                    "note": note,
                }
            )

    starters: dict[str, tuple[str, Callable[[], Any]]] = {
        "local": ("local server", lambda: LocalServerProvider()),
        "docker": ("Docker port", lambda: DockerProvider(image, pull=False)),
        "ray": ("Ray actors", lambda: local_ray(ray_cpus)),
    }
    for key in paths:
        name, start = starters[key]
        say(f"starting {name}")
        try:
            with start() as server:
                urls = server.urls if isinstance(server, RayProvider) else [server.url]
                note = {"docker": image, "ray": f"{len(urls)} actors"}.get(key, "")
                add(name, urls, note)
        except Exception as exc:  # noqa: BLE001 - a path that cannot run here says why
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            rows.append({"path": name, "sessions": None, "note": f"could not run: {reason}"})
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    def fmt(value: Any, spec: str) -> str:
        return "" if value is None else format(value, spec)

    lines = [
        "| path | sessions | steps/s | vs in-process | vs local server | note |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {fmt(r.get('sessions'), 'd')} | {fmt(r.get('steps_per_s'), ',.0f')} "
            f"| {fmt(r.get('vs_inprocess'), '.2f')} | {fmt(r.get('vs_local'), '.2f')} "
            f"| {r.get('note', '')} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="timed steps per session")
    parser.add_argument("--sessions", default="1,4", help="session counts, comma-separated")
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=["rgb", "grayscale", "ram"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--paths", default=",".join(PATHS), help="of: " + ", ".join(PATHS))
    parser.add_argument(
        "--image", default=os.environ.get("OPENENV_WS_BENCH_IMAGE", "openenv-ws/atari:ci")
    )
    parser.add_argument("--ray-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    parser.add_argument("--rounds", type=int, default=1, help="runs per row; the best counts")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(
            f"unknown path(s) {', '.join(sorted(unknown))}; choose from {', '.join(PATHS)}"
        )
    work = Workload.make(args.game, args.obs_type, args.seed, args.steps)
    rows = run(
        work,
        [int(n) for n in args.sessions.split(",")],
        paths=paths,
        image=args.image,
        ray_cpus=args.ray_cpus,
        rounds=args.rounds,
        say=lambda text: print(f"... {text}", file=sys.stderr, flush=True),
    )
    print(
        f"{args.game} {args.obs_type}, {args.steps} timed steps per session, best of "
        f"{args.rounds}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n"
    )
    print(table(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
