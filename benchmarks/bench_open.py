"""Session open to first observation: warm emulator pool vs cold ROM load.

Two local servers, one with a warm pool (``--pool-size``) and one without
(``--pool-size 0``). Each trial opens a session (WebSocket handshake,
``open``), resets it without a seed and times until the first observation
arrives; the session is closed and, on the pooled server, the next trial waits
(untimed) until the pool has refilled. The in-process cost of building an
``AtariEnvironment`` is measured in the same run for reference, and so is a
seeded first reset (it reloads the ROM, as ale-py's own environment does).

    python benchmarks/bench_open.py --trials 30
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from atari import AtariEnvironment
from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider


def _pool_ready(server: LocalServerProvider, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = server.health()
        if health is not None and health["pool"]["ready"] >= health["pool"]["size"]:
            return
        time.sleep(0.01)
    raise RuntimeError("the warm pool did not refill in time")


def open_to_first_obs(
    server: LocalServerProvider,
    config: dict[str, Any],
    trials: int,
    *,
    seed: int | None,
    pooled: bool,
) -> list[float]:
    times = []
    for _ in range(trials):
        if pooled:
            _pool_ready(server)
        start = time.perf_counter()
        client: EnvClient[Any] = EnvClient(server.url, config=config)
        client.reset(seed=seed)
        times.append(time.perf_counter() - start)
        client.close()
    return times


def inprocess_build(config: dict[str, Any], trials: int) -> list[float]:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        env = AtariEnvironment(config)
        env.reset()
        times.append(time.perf_counter() - start)
        env.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--pool-size", type=int, default=2)
    args = parser.parse_args()
    config = {"game": args.game}
    warm_args = [
        "--no-web",
        "--pool-size",
        str(args.pool_size),
        "--pool-warm",
        json.dumps({"game": args.game}),
    ]
    results: dict[str, list[float]] = {}
    with (
        LocalServerProvider(args=warm_args) as warm,
        LocalServerProvider(args=["--no-web", "--pool-size", "0"]) as cold,
    ):
        results["cold (no pool), reset()"] = open_to_first_obs(
            cold, config, args.trials, seed=None, pooled=False
        )
        results["warm pool, reset()"] = open_to_first_obs(
            warm, config, args.trials, seed=None, pooled=True
        )
        results["warm pool, reset(seed=0)"] = open_to_first_obs(
            warm, config, max(3, args.trials // 5), seed=0, pooled=True
        )
        health = warm.health()
    results["in-process AtariEnvironment() + reset()"] = inprocess_build(config, 5)
    print(f"game={args.game} trials={args.trials} pool size={args.pool_size}")
    print(f"{'open -> first observation':<42} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
    for name, samples in results.items():
        ms = np.array(samples) * 1e3
        print(
            f"{name:<42} {np.percentile(ms, 50):8.1f} {np.percentile(ms, 90):8.1f} {ms.max():8.1f}"
        )
    cold_p50 = np.percentile(results["cold (no pool), reset()"], 50)
    warm_p50 = np.percentile(results["warm pool, reset()"], 50)
    print(
        f"warm pool speed-up (p50): {cold_p50 / warm_p50:.0f}x; pool counters: {health and health['pool']}"
    )


if __name__ == "__main__":
    main()
