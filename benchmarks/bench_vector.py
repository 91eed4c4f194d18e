"""Server efficiency: 16 sessions pipelined through send/recv vs in-process ALE on one core.

The server runs as its own process pinned to core 0; the client runs on core
1 and keeps every session's next request in flight (EnvPool-style
``send``/``recv``), so the server's core never waits for the client. The
reference is in-process ALE pinned to the same core 0, measured in the same
run: one ``AtariEnvironment`` stepped in a loop, and the same number of
environments stepped round-robin (the server's access pattern). With
``--bare``, the same client also drives ``benchmarks/bare_ws_server.py`` (the
same session code behind the leanest possible asyncio WebSocket server), the
floor any Python server of protocol v1 stands on. With ``--full-colour``, the
same server is also measured with a client that asks for RGB frames instead
of colour codes (``indexed_frames=False``, SPEC section 18). Rounds alternate
between contenders; each one's best round is kept.

    python benchmarks/bench_vector.py --envs 16 --steps 6000 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from atari import AtariEnvironment
from benchmarks.measure import n_actions
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.providers import LocalServerProvider

SERVER_CORE, CLIENT_CORE = 0, 1


def inprocess(config: dict[str, Any], n_envs: int, steps: int, seed: int) -> tuple[float, float]:
    """Steps/s and CPU seconds per step of `n_envs` in-process environments stepped
    round-robin on the server's core."""
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {SERVER_CORE})
    try:
        envs = [AtariEnvironment(config) for _ in range(n_envs)]
        for i, env in enumerate(envs):
            env.reset(seed=seed + i)
        n = n_actions(envs[0].spec.action)
        actions = np.random.default_rng(seed).integers(0, n, steps).tolist()
        start, cpu = time.perf_counter(), time.process_time()
        for t, action in enumerate(actions):
            env = envs[t % n_envs]
            r = env.step(action)
            if r.terminated or r.truncated:
                env.reset()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        for env in envs:
            env.close()
    finally:
        os.sched_setaffinity(0, mask)
    return steps / elapsed, cpu / steps


def pipelined(
    server: psutil.Process,
    url: str,
    config: dict[str, Any],
    n_envs: int,
    steps: int,
    seed: int,
    busy_poll: float,
    indexed: bool | None = None,
) -> tuple[float, float, float]:
    """Steps/s of `n_envs` remote sessions kept busy with send/recv, the server's CPU
    seconds per step, and the mean batch size. `indexed`: the client's
    ``indexed_frames`` (None: its default)."""
    with VectorEnvClient(
        url, n_envs, config=config, copy=False, busy_poll=busy_poll, indexed_frames=indexed
    ) as envs:
        envs.reset(seed=seed)
        n = n_actions(envs.spec.action)
        rng = np.random.default_rng(seed)
        envs.send(rng.integers(0, n, n_envs))
        done = batches = 0
        before = server.cpu_times()
        start = time.perf_counter()
        while done < steps:
            _, _, _, _, infos = envs.recv()
            ids = infos["env_id"]
            done += len(ids)
            batches += 1
            envs.send(rng.integers(0, n, len(ids)), ids)
        elapsed = time.perf_counter() - start
        after = server.cpu_times()
        envs.recv(min_envs=len(envs.pending))
    cpu = (after.user - before.user) + (after.system - before.system)
    return done / elapsed, cpu / done, done / batches


@contextlib.contextmanager
def _bare(wanted: bool) -> Iterator[tuple[psutil.Process, str] | None]:
    """The bare server of benchmarks/bare_ws_server.py as a subprocess, if `wanted`."""
    if not wanted:
        yield None
        return
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bare_ws_server"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        found = re.search(r"ws://\S+", child.stdout.readline())
        if found is None:
            raise RuntimeError("benchmarks/bare_ws_server.py did not start")
        yield psutil.Process(child.pid), found.group(0)
    finally:
        child.kill()
        child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6000, help="steps per contender per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=["rgb", "grayscale", "ram"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bare", action="store_true", help="also measure benchmarks/bare_ws_server.py"
    )
    parser.add_argument(
        "--full-colour",
        action="store_true",
        help="also measure the server with RGB frames instead of colour codes (indexed_frames=False)",
    )
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=0.0,
        help="seconds the client spins before sleeping (it has its own core)",
    )
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("this benchmark needs two cores (server on one, client on the other)")
    config = {"game": args.game, "obs_type": args.obs_type}
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    batch = 0.0
    # name -> (server process, URL, the client's indexed_frames)
    remotes: dict[str, tuple[psutil.Process, str, bool | None]] = {}
    with (
        LocalServerProvider(args=["--no-web", "--pool-size", "0"]) as server,
        _bare(args.bare) as bare,
    ):
        assert server.process is not None
        main_server = psutil.Process(server.process.pid)
        remotes[f"websocket, {args.envs} sessions send/recv"] = (main_server, server.url, None)
        if args.full_colour:
            remotes["websocket, same, RGB frames"] = (main_server, server.url, False)
        if bare is not None:
            remotes[f"bare asyncio server, {args.envs} sessions"] = (*bare, None)
        for process, _, _ in remotes.values():
            os.sched_setaffinity(process.pid, {SERVER_CORE})
        os.sched_setaffinity(0, {CLIENT_CORE})
        for _ in range(args.rounds):
            runs: dict[str, Callable[[], tuple[float, float]]] = {
                "in-process, 1 env": lambda: inprocess(config, 1, args.steps, args.seed),
                f"in-process, {args.envs} envs round-robin": lambda: inprocess(
                    config, args.envs, args.steps, args.seed
                ),
            }
            for name, run in runs.items():
                rate, per_step = run()
                best[name] = max(best.get(name, 0.0), rate)
                cpu[name] = min(cpu.get(name, float("inf")), per_step)
            for name, (process, url, indexed) in remotes.items():
                rate, per_step, batch = pipelined(
                    process, url, config, args.envs, args.steps, args.seed, args.busy_poll, indexed
                )
                best[name] = max(best.get(name, 0.0), rate)
                cpu[name] = min(cpu.get(name, float("inf")), per_step)
    ref = best["in-process, 1 env"]
    print(
        f"game={args.game} obs_type={args.obs_type} envs={args.envs} steps={args.steps} "
        f"rounds={args.rounds} (best round); server on core {SERVER_CORE}, "
        f"client on core {CLIENT_CORE}; mean recv batch {batch:.1f}"
    )
    print(f"{'contender':<38} {'steps/s':>9} {'ratio':>6} {'CPU us/step':>12} {'ratio':>6}")
    ref_cpu = cpu["in-process, 1 env"]
    for name, rate in best.items():
        print(
            f"{name:<38} {rate:9.0f} {rate / ref:6.2f} {cpu[name] * 1e6:12.0f} "
            f"{ref_cpu / cpu[name]:6.2f}"
        )
    remote = best[f"websocket, {args.envs} sessions send/recv"]
    rr = best[f"in-process, {args.envs} envs round-robin"]
    print(
        f"server efficiency (steps/s): {remote / ref:.2f}x in-process 1 env, "
        f"{remote / rr:.2f}x round-robin"
    )
    print(
        "(the websocket row's CPU us/step is the server process's; on a busy machine its "
        "ratio is the steadier figure)"
    )


if __name__ == "__main__":
    main()
