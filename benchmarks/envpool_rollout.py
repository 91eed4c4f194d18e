"""Rollout throughput through EnvPool's API: EnvPool itself and ``openenv_ws.envpool``.

The same loop (random actions, no policy) on both, in the same run, in turns:
synchronous (``step``) and asynchronous (``async_reset``, ``send``/``recv``
with ``batch_size`` = ``num_envs / 2``), 84x84 grayscale stack 4 (EnvPool's
defaults)::

    python -m benchmarks.envpool_rollout --num-envs 8 --steps 4000 --rounds 3

Prints env steps per second per backend and mode, and the ratio
openenv-ws / EnvPool (best of the rounds).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def rollout(module: Any, task: str, num_envs: int, batch: int, steps: int, **kw: Any) -> float:
    """Env steps per second of `steps` env steps (after a warm-up) on one pool."""
    env = module.make(task, env_type="gymnasium", num_envs=num_envs, batch_size=batch, **kw)
    n = int(env.action_space.n)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, n, (1024, batch))
    if batch == num_envs:
        env.reset()
        for i in range(50):
            env.step(actions[i % 1024])
        start = time.perf_counter()
        for i in range(steps // batch):
            env.step(actions[i % 1024])
    else:
        env.async_reset()
        for i in range(50):
            info = env.recv()[4]
            env.send(actions[i % 1024], info["env_id"])
        start = time.perf_counter()
        for i in range(steps // batch):
            info = env.recv()[4]
            env.send(actions[i % 1024], info["env_id"])
        env.recv()
    elapsed = time.perf_counter() - start
    env.close()
    return (steps // batch) * batch / elapsed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="Breakout-v5")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-threads", type=int, default=0)
    p.add_argument("--url", default=None, help="openenv-ws server (default: a local one)")
    args = p.parse_args(argv)
    import envpool

    import openenv_ws.envpool as ours

    provider = None
    if args.url is None:  # one local server for every pool of the run
        from openenv_ws.providers.local import LocalServerProvider

        provider = LocalServerProvider().start()
    extra = {"url": args.url or provider.url}  # type: ignore[union-attr]
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for mode, batch in (("sync", args.num_envs), ("async", args.num_envs // 2)):
            for name, module, kw in (("envpool", envpool, {}), ("openenv-ws", ours, extra)):
                sps = rollout(
                    module,
                    args.task,
                    args.num_envs,
                    batch,
                    args.steps,
                    num_threads=args.num_threads,
                    **kw,
                )
                best[name, mode] = max(best.get((name, mode), 0.0), sps)
    if provider is not None:
        provider.stop()
    for mode in ("sync", "async"):
        theirs, mine = best["envpool", mode], best["openenv-ws", mode]
        print(
            f"{mode:5s} {args.num_envs} envs: envpool {theirs:,.0f} env steps/s, "
            f"openenv-ws {mine:,.0f}, ratio {mine / theirs:.2f}x"
        )


if __name__ == "__main__":
    main()
