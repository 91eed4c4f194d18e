"""The Atari plugin's ``openenv-ws`` subcommands: ``demo`` and ``games``.

Importing this module is cheap: the client and the emulator are imported
when a command runs, not when ``openenv-ws`` builds its parser.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from openenv_ws.registry import Command

__all__ = ["demo", "games", "pong_policy"]


def pong_policy(frame: Any) -> int:
    """Track the ball with the right (green) paddle. Pong's minimal actions:
    0 NOOP, 1 FIRE, 2 RIGHT (up), 3 LEFT (down), 4 RIGHTFIRE, 5 LEFTFIRE."""
    import numpy as np

    field = frame[34:194]
    paddle = np.nonzero((field[:, 140:144, 1] == 186).any(axis=1))[0]
    ball = np.nonzero((field[:, :140, 0] == 236).any(axis=1))[0]
    if paddle.size == 0 or ball.size == 0:
        return 1
    centre, target = paddle.mean(), ball.mean()
    if target < centre - 3:
        return 2
    if target > centre + 3:
        return 3
    return 0


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed of the episode")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="truncate the episode after this many steps (default: play it to the end)",
    )


def _run_demo(args: argparse.Namespace) -> int:
    import numpy as np

    from .client import AtariEnv

    print(
        "openenv-ws demo: starting a local server and playing Pong over a WebSocket ...", flush=True
    )
    latencies: list[float] = []
    score = [0, 0]
    with AtariEnv(game="pong", max_episode_steps=args.max_steps) as env:
        result = env.reset(seed=args.seed)
        start = time.perf_counter()
        while not result.done:
            action = pong_policy(result.observation.screen)
            t0 = time.perf_counter()
            result = env.step(action)
            latencies.append(time.perf_counter() - t0)
            if result.reward > 0:
                score[0] += int(result.reward)
            elif result.reward < 0:
                score[1] += int(-result.reward)
        elapsed = time.perf_counter() - start
        state = env.state()
        path = "through shared memory" if env.shared_memory_used else "over the socket"
        if env.indexed_frames_used:
            path = f"as colour codes {path}"
    lat = np.array(latencies) * 1e6
    print(
        f"episode {(state.episode_id or '?')[:8]}: {state.step_count} steps, "
        f"score {score[0]} (agent) - {score[1]} (cpu), "
        f"{'game over' if result.terminated else 'truncated'}"
    )
    print(
        f"{len(lat) / elapsed:,.0f} steps/s; step latency p50 {np.percentile(lat, 50):.0f} us, "
        f"p99 {np.percentile(lat, 99):.0f} us (RGB 210x160x3 frames {path})"
    )
    return 0


def _run_games(args: argparse.Namespace) -> int:
    from .config import games as bundled

    for name in bundled():
        print(name)
    return 0


#: ``openenv-ws demo``: an episode of Pong against an embedded server.
demo = Command(
    help="play an episode of Pong against an embedded server",
    add_arguments=_demo_arguments,
    run=_run_demo,
)

#: ``openenv-ws games``: the bundled games a session can open.
games = Command(
    help="list the bundled Atari games", add_arguments=lambda parser: None, run=_run_games
)
