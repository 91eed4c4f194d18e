"""Scale: 1,000 concurrent Atari sessions on one 2-worker server, each stepping.

Starts ``openenv-ws serve --workers 2``, opens the sessions with one
:class:`~openenv_ws.client.vector.VectorEnvClient` (all opens pipelined),
resets and steps every session, checks every result, and prints the server's
memory per session (resident and proportional set size of the parent and its
workers, after minus before) next to the in-process size of one emulator
measured in the same run.

    python benchmarks/bench_scale.py --sessions 1000
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

import numpy as np
import psutil

from atari import AtariEnvironment
from benchmarks.measure import n_actions
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import LocalServerProvider

MB = 1 << 20


def raise_open_file_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))


def server_memory(pid: int) -> tuple[float, float, int]:
    """RSS and PSS (bytes) of a process and its children, and how many processes."""
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    rss = pss = 0
    for p in procs:
        info = p.memory_full_info()
        rss += info.rss
        pss += info.pss
    return rss, pss, len(procs)


def emulator_size(config: dict[str, Any], n: int = 50) -> float:
    """Bytes of resident memory one in-process AtariEnvironment adds (mean over `n`)."""
    me = psutil.Process()
    before = me.memory_info().rss
    envs = [AtariEnvironment(config) for _ in range(n)]
    for env in envs:
        env.reset()
        env.step(0)
    size = (me.memory_info().rss - before) / n
    for env in envs:
        env.close()
    return float(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=["rgb", "grayscale", "ram"])
    parser.add_argument("--steps", type=int, default=3, help="batched steps after the reset")
    args = parser.parse_args()
    n = args.sessions
    raise_open_file_limit(n + 256)
    config = {"game": args.game, "obs_type": args.obs_type}
    per_worker = n // args.workers + 64
    serve_args = ["--workers", str(args.workers), "--no-web", "--max-sessions", str(per_worker)]
    with LocalServerProvider(args=serve_args, startup_timeout=120) as server:
        assert server.process is not None
        time.sleep(2.0)  # let the warm pools fill, so they count in the baseline
        rss0, pss0, procs = server_memory(server.process.pid)
        start = time.perf_counter()
        with VectorEnvClient(
            server.url, n, config=config, copy=False, open_timeout=1800, timeout=600
        ) as envs:
            opened = time.perf_counter() - start
            obs, infos = envs.reset()
            frames = np.zeros(n, np.int64)
            rng = np.random.default_rng(0)
            stepped = 0
            for _ in range(args.steps):
                infos = envs.step(rng.integers(0, n_actions(envs.spec.action), n))[4]
                frames = np.maximum(frames, infos["frame_number"])
                stepped += n
            elapsed = time.perf_counter() - start
            assert obs.shape[0] == n
            assert (frames == 4 * args.steps).all(), "a session did not advance every step"
            health = server.health(timeout=30)
            assert health is not None and health["sessions_total"] == n, health
            rss1, pss1, _ = server_memory(server.process.pid)
        per_worker_sessions = [w["sessions"] for w in health["workers"]]
    emulator = emulator_size(config)
    print(
        f"sessions={n} workers={args.workers} game={args.game} obs_type={args.obs_type}: "
        f"all opened in {opened:.1f} s, {stepped} steps, no errors; "
        f"sessions per worker {per_worker_sessions}; total {elapsed:.1f} s"
    )
    print(f"server processes: {procs}; before: RSS {rss0 / MB:.0f} MB, PSS {pss0 / MB:.0f} MB")
    print(f"with {n} sessions: RSS {rss1 / MB:.0f} MB, PSS {pss1 / MB:.0f} MB")
    print(
        f"server memory per session: RSS {(rss1 - rss0) / n / MB:.2f} MB, "
        f"PSS {(pss1 - pss0) / n / MB:.2f} MB (target <= 3 MB); "
        f"one in-process emulator: {emulator / MB:.2f} MB"
    )


if __name__ == "__main__":
    main()
