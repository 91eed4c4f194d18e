"""HTTP fallback step throughput next to the WebSocket client and in-process ALE.

One server process (started by the local provider, as in production) serves
every remote path; all paths play the same game, options, seed and actions.
Printed per path: p50/p99 step latency, steps/s, and the ratio to in-process
and to the WebSocket client, measured in the same run:

- ``in-process``: ``AtariEnvironment.step`` (the reference);
- ``websocket``: ``EnvClient`` (protocol v1, MessagePack over one WebSocket);
- ``http-msgpack`` / ``http-json``: ``HTTPEnvClient`` on ``/v1/sessions``;
- ``openenv-ws`` / ``openenv-http``: OpenEnv's JSON dialect on ``/ws``
  (openenv-core's own client) and OpenEnv's ``POST /step`` route (a
  ``requests.Session``), when openenv-core is installed (the ``compat`` extra).

    python benchmarks/bench_http.py --steps 2000 --obs-type rgb --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from atari import AtariEnvironment
from benchmarks.measure import n_actions
from openenv_ws.client import EnvClient, HTTPEnvClient
from openenv_ws.providers import LocalServerProvider

Step = Callable[[int], bool]  # plays one action; True when the episode ended


def timed(
    actions: np.ndarray[Any, Any], step: Step, reset: Callable[[], object]
) -> dict[str, float]:
    """Per-step latency of `step` over `actions` (resets are not timed)."""
    clock = time.perf_counter
    times = np.empty(len(actions))
    for i, action in enumerate(actions.tolist()):
        t0 = clock()
        done = step(action)
        times[i] = clock() - t0
        if done:
            reset()
    us = times * 1e6
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "steps_per_s": len(us) / float(times.sum()),
    }


def in_process(
    config: dict[str, Any], actions: np.ndarray[Any, Any], seed: int
) -> dict[str, float]:
    env = AtariEnvironment(config)
    env.reset(seed=seed)
    try:
        return timed(actions, lambda a: env.step(a).done, env.reset)
    finally:
        env.close()


def client(make: Callable[[], Any], actions: np.ndarray[Any, Any], seed: int) -> dict[str, float]:
    with make() as env:
        env.reset(seed=seed)
        return timed(actions, lambda a: env.step(a).done, env.reset)


def openenv_websocket(http_url: str, actions: np.ndarray[Any, Any], seed: int) -> dict[str, float]:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=http_url).sync() as env:
        env.reset(seed=seed)
        return timed(actions, lambda a: env.step({"action_id": a}).done, env.reset)


def openenv_http(http_url: str, actions: np.ndarray[Any, Any], seed: int) -> dict[str, float]:
    import requests

    with requests.Session() as s:
        s.post(f"{http_url}/reset", json={"seed": seed}).raise_for_status()

        def step(action: int) -> bool:
            r = s.post(f"{http_url}/step", json={"action": {"action_id": action}})
            r.raise_for_status()
            done: bool = r.json()["done"]
            return done

        return timed(actions, step, lambda: s.post(f"{http_url}/reset", json={}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=["rgb", "grayscale", "ram"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; best is kept")
    parser.add_argument(
        "--placement",
        choices=["any", "split"],
        default="any",
        help="cores: any (OS decides) or split (server on core 0, client on core 1)",
    )
    parser.add_argument("--no-openenv", action="store_true", help="leave OpenEnv's clients out")
    args = parser.parse_args()

    config = {"game": args.game, "obs_type": args.obs_type}
    count = n_actions(AtariEnvironment(config).spec.action)
    actions = np.random.default_rng(args.seed).integers(0, count, args.steps)
    seed = args.seed
    with_openenv = not args.no_openenv
    if with_openenv:
        try:
            import openenv.core  # noqa: F401
            import requests  # noqa: F401
        except ImportError:
            print("openenv-core is not installed (pip install '.[compat]'): its paths are left out")
            with_openenv = False

    best: dict[str, dict[str, float]] = {}
    serve_args = ["--openenv-config", json.dumps(config)]
    with LocalServerProvider(args=serve_args) as server:
        if args.placement == "split":
            assert server.process is not None
            os.sched_setaffinity(server.process.pid, {0})
            os.sched_setaffinity(0, {1})
        url, http_url = server.url, server.http_url
        paths: list[tuple[str, Callable[[], dict[str, float]]]] = [
            ("in-process", lambda: in_process(config, actions, seed)),
            ("websocket", lambda: client(lambda: EnvClient(url, config=config), actions, seed)),
            (
                "http-msgpack",
                lambda: client(lambda: HTTPEnvClient(http_url, config=config), actions, seed),
            ),
            (
                "http-json",
                lambda: client(
                    lambda: HTTPEnvClient(http_url, config=config, encoding="json"), actions, seed
                ),
            ),
        ]
        if with_openenv:
            paths += [
                ("openenv-ws", lambda: openenv_websocket(http_url, actions, seed)),
                ("openenv-http", lambda: openenv_http(http_url, actions, seed)),
            ]
        for _ in range(args.rounds):
            for name, run in paths:
                stats = run()
                if name not in best or stats["steps_per_s"] > best[name]["steps_per_s"]:
                    best[name] = stats

    ref = best["in-process"]["steps_per_s"]
    ws = best["websocket"]["steps_per_s"]
    print(
        f"game={args.game} obs_type={args.obs_type} steps={args.steps} rounds={args.rounds} "
        f"placement={args.placement}"
    )
    print(
        f"{'path':<13} {'p50 us':>8} {'p99 us':>9} {'steps/s':>9} {'/in-proc':>9} {'/websocket':>11}"
    )
    for name, s in best.items():
        print(
            f"{name:<13} {s['p50_us']:8.0f} {s['p99_us']:9.0f} {s['steps_per_s']:9.0f} "
            f"{s['steps_per_s'] / ref:9.3f} {s['steps_per_s'] / ws:11.3f}"
        )


if __name__ == "__main__":
    main()
