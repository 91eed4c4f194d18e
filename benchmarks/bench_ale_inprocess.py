"""In-process cost of AtariEnvironment.step against a bare ALEInterface loop.

Every contender plays the same seeded episode with the same actions, so the
emulation work is identical and the difference is the wrapper's own cost:

- ``raw act x4``: ``ale.act`` four times (frameskip 4), nothing else.
- ``raw act x4 + obs``: the same plus ``getScreenRGB`` (or grayscale/RAM),
  game-over, truncation and the three info reads a step result needs.
- ``env.step(obs=False)`` and ``env.step``: :class:`atari.AtariEnvironment`.
- ``server session``: a server's :class:`ServerSession` serving encoded step
  requests (reply bytes out, frames into a shared region, no socket): what
  the server adds to ``env.step`` per step before any I/O.
- ``gymnasium``: ale-py's own ``ALE/<Game>-v5`` env, when gymnasium is installed.

Rounds alternate between contenders; the report gives each one's median CPU
time per step over the rounds and its overhead over the matching raw loop.

Emulation varies by several microseconds between rounds, more than the
wrapper costs, so a second table isolates the wrapper: once the frame limit
is reached ALE's ``act`` returns without emulating, and the same loops then
measure only the Python around it (RAM observation, which costs ~0.3 us).

A third table times resets: a seeded one as AtariEnvironment does it (restore
the state a ROM load leaves), the same with the ROM reloaded (ale-py's way,
and this environment's fallback), gymnasium's ``reset(seed=...)``, and an
unseeded reset. Each holds the GIL throughout, so a thread that wakes every
millisecond (as another session's step would) measures the stall it causes:
the longest gap between its wake-ups while the resets run.

Usage::

    python benchmarks/bench_ale_inprocess.py [--game pong] [--obs-type rgb]
        [--steps 2000] [--rounds 7] [--resets 10] [--only steps|resets]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import ale_py
import numpy as np

from atari import AtariEnvironment, atari_factory
from benchmarks.measure import n_actions, raw_ale
from openenv_ws._shm import ClientRegion, ServerRegion, shared_memory_supported
from openenv_ws.protocol import Open, Reset, SessionState, encode, encode_step
from openenv_ws.server import ServerSession

#: (prepare, run): ``prepare`` seeds a fresh episode untimed; ``run`` plays the actions.
Runner = tuple[Callable[[], None], Callable[[list[int]], None]]


def _signed(seed: int) -> int:
    return seed - (1 << 32) if seed >= 1 << 31 else seed


def _raw(game: str, obs_type: str, ale_seed: int, *, full: bool) -> Runner:
    ale, rom = raw_ale(game)

    def prepare() -> None:
        ale.setInt("random_seed", _signed(ale_seed))
        ale.loadROM(rom)
        ale.reset_game()

    prepare()
    actions = ale.getMinimalActionSet()
    get_obs = {
        "rgb": ale.getScreenRGB,
        "grayscale": ale.getScreenGrayscale,
        "ram": ale.getRAM,
    }[obs_type]
    act, game_over, truncated = ale.act, ale.game_over, ale.game_truncated
    lives, episode_frame, frame = ale.lives, ale.getEpisodeFrameNumber, ale.getFrameNumber

    def run(indices: list[int]) -> None:
        for i in indices:
            a = actions[i]
            act(a)
            act(a)
            act(a)
            act(a)
            if full:
                get_obs()
                lives(), episode_frame(), frame()
                if game_over(with_truncation=False) or truncated():
                    ale.reset_game()
            elif game_over():
                ale.reset_game()

    return prepare, run


def _ours(env: AtariEnvironment, seed: int, *, obs: bool) -> Runner:
    step = env.step

    def run(indices: list[int]) -> None:
        for i in indices:
            if step(i, obs=obs).done:
                env.reset()

    def prepare() -> None:
        env.reset(seed=seed)

    return prepare, run


def _session(config: dict[str, Any], seed: int, indices: list[int]) -> Runner:
    """A server's session: step requests in, reply bytes out, no socket.

    Frames go into a shared region as for a client on the same host. The
    requests are encoded beforehand (that is the client's work).
    """
    session = ServerSession(atari_factory, max_frame_size=1 << 20)
    session.handle(encode(Open(id=1, config=config)))
    region = ClientRegion() if shared_memory_supported() else None
    if region is not None:
        session.use_shared(ServerRegion.attach(region.offer()))
    requests = [encode_step(rid, i) for rid, i in enumerate(indices, start=3)]
    reset = encode(Reset(id=2))
    handle = session.handle

    def run(batch: list[int]) -> None:
        for data in requests[: len(batch)]:
            handle(data)
            if session.state is SessionState.ENDED:
                handle(reset)

    def prepare() -> None:
        handle(encode(Reset(id=2, seed=seed)))

    return prepare, run


def _gym_env(game: str, obs_type: str) -> Any:
    """ale-py's own ``ALE/<Game>-v5`` env, or None without gymnasium."""
    try:
        import gymnasium
    except ImportError:
        return None
    gymnasium.register_envs(ale_py)
    return gymnasium.make("ALE/" + game.title().replace("_", "") + "-v5", obs_type=obs_type)


def _gym(game: str, obs_type: str, seed: int) -> Runner | None:
    env = _gym_env(game, obs_type)
    if env is None:
        return None

    def run(indices: list[int]) -> None:
        for i in indices:
            _, _, terminated, truncated, _ = env.step(i)
            if terminated or truncated:
                env.reset()

    def prepare() -> None:
        env.reset(seed=seed)

    return prepare, run


def _idle_overhead(game: str, calls: int, rounds: int) -> dict[str, float]:
    """Median ns per step with the emulator idle (episode over at its first frame)."""
    env = AtariEnvironment({"game": game, "obs_type": "ram", "max_num_frames_per_episode": 1})
    env.reset(seed=0)
    env.step(0)
    ale = env._ale  # the same emulator, driven bare
    assert ale is not None and ale.game_truncated()
    a = ale.getMinimalActionSet()[1]
    act, over, trunc = ale.act, ale.game_over, ale.game_truncated
    lives, ep, fr, ram = ale.lives, ale.getEpisodeFrameNumber, ale.getFrameNumber, ale.getRAM

    def raw() -> None:
        for _ in range(calls):
            act(a)
            act(a)
            act(a)
            act(a)
            ram()
            over(with_truncation=False), trunc(), lives(), ep(), fr()

    def ours(obs: bool) -> Callable[[], None]:
        step = env.step

        def run() -> None:
            for _ in range(calls):
                step(1, obs=obs)

        return run

    loops = {
        "raw loop (idle)": raw,
        "env.step (idle)": ours(True),
        "env.step(obs=False) (idle)": ours(False),
    }
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, loop in loops.items():
            start = time.process_time()
            loop()
            times[name].append((time.process_time() - start) / calls * 1e9)
    env.close()
    return {name: statistics.median(t) for name, t in times.items()}


class _Ticker(threading.Thread):
    """Wakes every millisecond and records the gaps between its wake-ups."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.gaps: list[float] = []
        self._done = threading.Event()

    def run(self) -> None:
        last = time.perf_counter()
        while not self._done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    def stop(self) -> float:
        """Stop; the longest gap in ms."""
        self._done.set()
        self.join()
        return max(self.gaps) * 1e3


def _reset_costs(game: str, obs_type: str, resets: int, rounds: int) -> None:
    """Print median ms per reset and the longest stall of a 1 ms ticker thread."""
    config = {"game": game, "obs_type": obs_type}
    restoring, reloading = AtariEnvironment(config), AtariEnvironment(config)
    reloading._post_load = None  # the fallback path: load the ROM as ale-py does
    contenders: dict[str, Callable[[int], object]] = {
        "seeded, restore": lambda s: restoring.reset(seed=s),
        "seeded, reload ROM": lambda s: reloading.reset(seed=s),
        "unseeded": lambda s: restoring.reset(),
    }
    gym_env = _gym_env(game, obs_type)
    if gym_env is not None:
        contenders["gymnasium reset(seed)"] = lambda s: gym_env.reset(seed=s)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    stalls: dict[str, list[float]] = {name: [] for name in contenders}
    idle: list[float] = []
    for r in range(rounds):
        ticker = _Ticker()
        ticker.start()
        time.sleep(0.05)
        idle.append(ticker.stop())
        for name, reset in contenders.items():
            ticker = _Ticker()
            ticker.start()
            time.sleep(0.005)
            for i in range(resets):
                start = time.perf_counter()
                reset(r * resets + i)
                times[name].append((time.perf_counter() - start) * 1e3)
                time.sleep(0.003)  # let the ticker run between resets
            stalls[name].append(ticker.stop())
    restoring.close()
    reloading.close()
    print(
        f"\nresets: game={game} obs_type={obs_type} {resets} resets x {rounds} rounds; "
        f"ticker alone: longest gap {statistics.median(idle):.2f} ms (median of rounds)"
    )
    base = statistics.median(times["seeded, reload ROM"])
    print(f"{'reset':<24}{'median ms':>10}{'vs reload':>11}{'longest ticker gap ms':>23}")
    for name in contenders:
        value = statistics.median(times[name])
        print(
            f"{name:<24}{value:>10.2f}{value / base:>11.3f}{statistics.median(stalls[name]):>23.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--obs-type", default="rgb", choices=("rgb", "grayscale", "ram"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--resets", type=int, default=10, help="resets per contender and round")
    parser.add_argument("--only", choices=("steps", "resets"))
    args = parser.parse_args()
    if args.only != "steps":
        _reset_costs(args.game, args.obs_type, args.resets, args.rounds)
    if args.only == "resets":
        return

    seed = 2024
    env = AtariEnvironment({"game": args.game, "obs_type": args.obs_type})
    ale_seed = env.reset(seed=seed).info["seeds"][1]
    n = n_actions(env.spec.action)
    indices = np.random.default_rng(0).integers(n, size=args.steps).tolist()

    contenders: dict[str, Runner] = {
        "raw act x4": _raw(args.game, args.obs_type, ale_seed, full=False),
        "raw act x4 + obs": _raw(args.game, args.obs_type, ale_seed, full=True),
        "env.step(obs=False)": _ours(env, seed, obs=False),
        "env.step": _ours(env, seed, obs=True),
        "server session": _session({"game": args.game, "obs_type": args.obs_type}, seed, indices),
    }
    gym_runner = _gym(args.game, args.obs_type, seed)
    if gym_runner is not None:
        contenders["gymnasium ALE v5"] = gym_runner

    times: dict[str, list[float]] = {name: [] for name in contenders}
    for prepare, run in contenders.values():  # warm-up
        prepare()
        run(indices[:50])
    for _ in range(args.rounds):
        for name, (prepare, run) in contenders.items():
            prepare()
            # CPU time of this process: other load on the machine does not count.
            start = time.process_time()
            run(indices)
            times[name].append((time.process_time() - start) / len(indices) * 1e6)
    env.close()

    median = {name: statistics.median(t) for name, t in times.items()}
    reference = {
        "raw act x4": "raw act x4",
        "raw act x4 + obs": "raw act x4",
        "env.step(obs=False)": "raw act x4",
        "env.step": "raw act x4 + obs",
        "server session": "env.step",
        "gymnasium ALE v5": "raw act x4 + obs",
    }
    print(
        f"game={args.game} obs_type={args.obs_type} steps={args.steps} rounds={args.rounds} "
        f"(frameskip 4, sticky 0.25; median CPU us per agent step)"
    )
    print(f"{'contender':<22}{'us/step':>10}{'vs ref':>9}{'overhead us':>13}  reference")
    for name, value in median.items():
        ref = reference[name]
        print(
            f"{name:<22}{value:>10.1f}{value / median[ref]:>9.3f}"
            f"{value - median[ref]:>13.2f}  {ref}"
        )
    idle = _idle_overhead(args.game, 100_000, args.rounds)
    base = idle["raw loop (idle)"]
    print("\nwrapper alone (emulator idle, RAM obs; median CPU ns per step)")
    for name, value in idle.items():
        print(f"{name:<28}{value:>8.0f} ns  overhead {value - base:>6.0f} ns")


if __name__ == "__main__":
    main()
