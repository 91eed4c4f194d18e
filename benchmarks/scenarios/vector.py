"""Server efficiency: N sessions pipelined through send/recv vs in-process ALE on one core.

The server runs pinned to the split placement's server core; the vector
client runs on the client core and keeps every session's next request in
flight (EnvPool-style ``send``/``recv``), so the server's core never waits for
the client. The reference is in-process ALE pinned to the same server core,
measured in the same run: one ``AtariEnvironment`` stepped in a loop, and the
same number of environments stepped round-robin (the server's access
pattern). The server is measured twice: with the client's default colour
codes (SPEC section 18) and with RGB frames (``indexed_frames=False``).
Rounds alternate between contenders; each one's best round is kept.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import psutil

from atari import AtariEnvironment
from openenv_ws.client.vector import VectorEnvClient

from ..measure import Placement, n_actions
from ..servers import our_server
from ..suite import Column, Context, Section, has_attr, scenario, two_cores

__all__ = ["inprocess_round_robin", "pipelined"]

COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("path", "contender"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("vs_inprocess", "vs in-process 1 env", ".2f"),
    Column("cpu_us", "CPU µs/step", ".1f"),
    Column("cpu_vs_inprocess", "CPU vs in-process", ".2f"),
    Column("batch", "mean recv batch", ".1f"),
]


def _requires() -> str | None:
    return (
        two_cores()
        or has_attr("openenv_ws.client.vector", "VectorEnvClient", "the vector client")()
    )


def inprocess_round_robin(
    config: dict[str, Any], n_envs: int, steps: int, seed: int
) -> tuple[float, float]:
    """Steps/s and CPU seconds per step of `n_envs` in-process environments stepped
    round-robin (on the calling thread's cores)."""
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
    return steps / elapsed, cpu / steps


def pipelined(
    server: psutil.Process,
    url: str,
    config: dict[str, Any],
    n_envs: int,
    steps: int,
    seed: int,
    indexed: bool | None = None,
) -> tuple[float, float, float]:
    """Steps/s of `n_envs` remote sessions kept busy with send/recv, the server's CPU
    seconds per step, and the mean batch size. `indexed`: the client's
    ``indexed_frames`` (None: its default)."""
    with VectorEnvClient(url, n_envs, config=config, copy=False, indexed_frames=indexed) as envs:
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


@scenario(
    "vector",
    "Server efficiency: pipelined sessions vs in-process",
    requires=_requires,
    default=False,
)
def run(ctx: Context) -> Section:
    """N sessions kept busy through the vector client's send/recv vs in-process ALE."""
    opts = ctx.options
    n_envs, steps = opts.vector_envs, max(opts.steps, opts.vector_envs)
    section = Section("vector", "Server efficiency: pipelined sessions vs in-process", COLUMNS)
    placement = Placement.named("split")
    works = [(game, obs) for game in opts.games for obs in opts.obs_types]
    ctx.progress.start(section.title, len(works) * max(1, opts.rounds))
    with our_server(placement, ["--no-web", "--pool-size", "0"]) as server:
        assert server.process is not None
        process = psutil.Process(server.process.pid)
        for game, obs in works:
            config = {"game": game, "obs_type": obs}
            local = {"in-process, 1 env": 1, f"in-process, {n_envs} envs round-robin": n_envs}
            remote: dict[str, bool | None] = {f"openenv-ws, {n_envs} sessions send/recv": None}
            if obs == "rgb":
                remote["openenv-ws, same, RGB frames"] = False
            best: dict[str, dict[str, float]] = {}
            for r in range(max(1, opts.rounds)):
                ctx.progress.phase(f"{game} {obs} round {r + 1}")
                for name, count in local.items():
                    with placement.server_side():
                        rate, cpu = inprocess_round_robin(config, count, steps, opts.seed)
                    _keep(best, name, rate, cpu, 1.0)
                for name, indexed in remote.items():
                    with placement.client_side():
                        rate, cpu, batch = pipelined(
                            process, server.url, config, n_envs, steps, opts.seed, indexed
                        )
                    _keep(best, name, rate, cpu, batch)
            ref = best["in-process, 1 env"]
            for name, row in best.items():
                section.add(
                    game=game,
                    obs=obs,
                    path=name,
                    steps_per_s=row["rate"],
                    vs_inprocess=row["rate"] / ref["rate"],
                    cpu_us=row["cpu"] * 1e6,
                    cpu_vs_inprocess=ref["cpu"] / row["cpu"],
                    batch=row["batch"] if name.startswith("openenv-ws") else None,
                )
    section.notes.append(
        f"{n_envs} sessions, {steps} steps per contender and round, best of {opts.rounds} "
        f"rounds; {placement.describe()}, the in-process references on the server's core. "
        "A remote row's CPU is the server process's (on a busy machine its ratio is the "
        "steadier figure)."
    )
    return section


def _keep(
    best: dict[str, dict[str, float]], name: str, rate: float, cpu: float, batch: float
) -> None:
    row = best.setdefault(name, {"rate": 0.0, "cpu": float("inf"), "batch": batch})
    if rate > row["rate"]:
        row["rate"], row["batch"] = rate, batch
    row["cpu"] = min(row["cpu"], cpu)
