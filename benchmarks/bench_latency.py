"""Single-session step latency: in-process ALE vs openenv-ws over a real WebSocket.

Both sides play the same game with the same options, seed and action
sequence; the script prints p50/p99 latency, steps/s and the ratio of remote
to in-process throughput. The server runs as a separate process (as in
production), started by the local provider.

    python benchmarks/bench_latency.py --steps 5000 --obs-type rgb
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

from atari import AtariEnvironment
from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider


def _stats(samples: list[float]) -> dict[str, float]:
    arr = np.array(samples) * 1e6
    return {
        "p50_us": float(np.percentile(arr, 50)),
        "p99_us": float(np.percentile(arr, 99)),
        "steps_per_s": len(arr) / (arr.sum() / 1e6),
    }


def run_inprocess(config: dict[str, Any], actions: np.ndarray, seed: int) -> dict[str, float]:
    env = AtariEnvironment(config)
    env.reset(seed=seed)
    times = []
    clock = time.perf_counter
    for a in actions:
        t0 = clock()
        r = env.step(int(a))
        times.append(clock() - t0)
        if r.terminated or r.truncated:
            env.reset()
    env.close()
    return _stats(times)


BUSY = 0.0


def run_remote(
    url: str, config: dict[str, Any], actions: np.ndarray, seed: int
) -> dict[str, float]:
    times = []
    clock = time.perf_counter
    with EnvClient(url, config=config, busy_poll=BUSY) as env:
        env.reset(seed=seed)
        for a in actions:
            t0 = clock()
            r = env.step(int(a))
            times.append(clock() - t0)
            if r.done:
                env.reset()
    return _stats(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=["rgb", "grayscale", "ram"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--placement",
        choices=["any", "split", "shared"],
        default="any",
        help="cores: any (OS decides), split (server 0, client 1), shared (both 1)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best is kept")
    args = parser.parse_args()

    config = {"game": args.game, "obs_type": args.obs_type}
    n_actions = AtariEnvironment(config).spec.action.n
    actions = np.random.default_rng(args.seed).integers(0, n_actions, args.steps)
    best: dict[str, dict[str, float]] = {}
    with LocalServerProvider() as server:
        assert server.process is not None
        if args.placement == "split":
            # Server on core 0, client (and the in-process reference) on core 1.
            os.sched_setaffinity(server.process.pid, {0})
            os.sched_setaffinity(0, {1})
        elif args.placement == "shared":
            # Both on core 1: a blocked client hands the core straight to the server.
            os.sched_setaffinity(server.process.pid, {1})
            os.sched_setaffinity(0, {1})
        for _ in range(args.rounds):
            for name, fn in (
                ("in-process", lambda: run_inprocess(config, actions, args.seed)),
                ("websocket", lambda: run_remote(server.url, config, actions, args.seed)),
            ):
                s = fn()
                if name not in best or s["steps_per_s"] > best[name]["steps_per_s"]:
                    best[name] = s
    ref = best["in-process"]["steps_per_s"]
    print(f"game={args.game} obs_type={args.obs_type} steps={args.steps} rounds={args.rounds}")
    print(f"{'path':<12} {'p50 us':>8} {'p99 us':>8} {'steps/s':>9} {'ratio':>6}")
    for name, s in best.items():
        print(
            f"{name:<12} {s['p50_us']:8.0f} {s['p99_us']:8.0f} {s['steps_per_s']:9.0f} "
            f"{s['steps_per_s'] / ref:6.2f}"
        )


if __name__ == "__main__":
    main()
