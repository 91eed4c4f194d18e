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

Rounds alternate between contenders; the table gives each one's median CPU
time per step over the rounds and its overhead over the matching raw loop.

Emulation varies by several microseconds between rounds, more than the
wrapper costs, so *idle* rows isolate the wrapper: once the frame limit
is reached ALE's ``act`` returns without emulating, and the same loops then
measure only the Python around it (RAM observation, which costs ~0.3 us).

Reset rows time resets: a seeded one as AtariEnvironment does it (restore
the state a ROM load leaves), the same with the ROM reloaded (ale-py's way,
and this environment's fallback), gymnasium's ``reset(seed=...)``, and an
unseeded reset. Each holds the GIL throughout, so a thread that wakes every
millisecond (as another session's step would) measures the stall it causes:
the longest gap between its wake-ups while the resets run.

Sizes: ``--steps`` agent steps and ``--rounds`` rounds per contender, 50x
``--steps`` idle steps, ``--steps``/200 resets (at least 2) per contender and
round. The runtime's internals it drives (the environment's emulator, its
restore state, a server session with a shared region) are imported when the
scenario runs.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..measure import n_actions, raw_ale
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

COLUMNS = [
    Column("what", "what"),
    Column("path", "contender"),
    Column("value", "median", ".2f"),
    Column("vs_reference", "vs reference", ".3f"),
    Column("overhead", "overhead", "+.2f"),
    Column("reference", "reference"),
    Column("stall_ms", "longest 1 ms-ticker gap, ms", ".2f"),
]
#: Each contender's reference: the raw loop doing the same work.
REFERENCE = {
    "raw act x4": "raw act x4",
    "raw act x4 + obs": "raw act x4",
    "env.step(obs=False)": "raw act x4",
    "env.step": "raw act x4 + obs",
    "server session": "env.step",
    "gymnasium ALE v5": "raw act x4 + obs",
}


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


def _ours(env: Any, seed: int, *, obs: bool) -> Runner:
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
    from atari import atari_factory
    from openenv_ws._shm import ClientRegion, ServerRegion, shared_memory_supported
    from openenv_ws.protocol import Open, Reset, SessionState, Step, encode
    from openenv_ws.server import ServerSession

    session = ServerSession(atari_factory, max_frame_size=1 << 20)
    session.handle(encode(Open(id=1, config=config)))
    region = ClientRegion() if shared_memory_supported() else None
    if region is not None:
        session.use_shared(ServerRegion.attach(region.offer()))
    requests = [encode(Step(id=rid, action=i)) for rid, i in enumerate(indices, start=3)]
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
    import ale_py

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
    from atari import AtariEnvironment

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


def _reset_costs(game: str, obs_type: str, resets: int, rounds: int, section: Section) -> None:
    """Rows of median ms per reset and the longest stall of a 1 ms ticker thread."""
    from atari import AtariEnvironment

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
    base = statistics.median(times["seeded, reload ROM"])
    for name in contenders:
        value = statistics.median(times[name])
        section.add(
            what="reset, ms",
            path=name,
            value=value,
            reference="seeded, reload ROM",
            vs_reference=value / base,
            overhead=value - base,
            stall_ms=statistics.median(stalls[name]),
        )
    section.notes.append(
        f"resets: {resets} per contender x {rounds} rounds; a 1 ms ticker thread alone: "
        f"longest gap {statistics.median(idle):.2f} ms (median of rounds)."
    )


def _steps(game: str, obs_type: str, steps: int, rounds: int, section: Section) -> None:
    from atari import AtariEnvironment

    seed = 2024
    env = AtariEnvironment({"game": game, "obs_type": obs_type})
    ale_seed = env.reset(seed=seed).info["seeds"][1]
    n = n_actions(env.spec.action)
    indices = np.random.default_rng(0).integers(n, size=steps).tolist()
    contenders: dict[str, Runner] = {
        "raw act x4": _raw(game, obs_type, ale_seed, full=False),
        "raw act x4 + obs": _raw(game, obs_type, ale_seed, full=True),
        "env.step(obs=False)": _ours(env, seed, obs=False),
        "env.step": _ours(env, seed, obs=True),
        "server session": _session({"game": game, "obs_type": obs_type}, seed, indices),
    }
    gym_runner = _gym(game, obs_type, seed)
    if gym_runner is not None:
        contenders["gymnasium ALE v5"] = gym_runner
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for prepare, run in contenders.values():  # warm-up
        prepare()
        run(indices[:50])
    for _ in range(rounds):
        for name, (prepare, run) in contenders.items():
            prepare()
            # CPU time of this process: other load on the machine does not count.
            start = time.process_time()
            run(indices)
            times[name].append((time.process_time() - start) / len(indices) * 1e6)
    env.close()
    median = {name: statistics.median(t) for name, t in times.items()}
    for name, value in median.items():
        ref = REFERENCE[name]
        section.add(
            what="step, CPU µs",
            path=name,
            value=value,
            reference=ref,
            vs_reference=value / median[ref],
            overhead=value - median[ref],
        )


@scenario("wrapper", "The environment wrapper's own cost, in-process", default=False)
def run(ctx: Context) -> Section:
    """AtariEnvironment and a server session without sockets vs a bare ALE loop; resets."""
    opts = ctx.options
    game, obs_type = opts.games[0], opts.obs_types[0]
    rounds = max(1, opts.rounds)
    section = Section("wrapper", "The environment wrapper's own cost, in-process", COLUMNS)
    ctx.progress.start(section.title, 3)
    ctx.progress.phase("steps")
    _steps(game, obs_type, opts.steps, rounds, section)
    ctx.progress.phase("idle steps")
    idle = _idle_overhead(game, 50 * opts.steps, rounds)
    base = idle["raw loop (idle)"]
    for name, value in idle.items():
        section.add(
            what="idle step, CPU ns",
            path=name,
            value=value,
            reference="raw loop (idle)",
            vs_reference=value / base,
            overhead=value - base,
        )
    ctx.progress.phase("resets")
    _reset_costs(game, obs_type, max(2, opts.steps // 200), rounds, section)
    section.notes.append(
        f"{game} {obs_type}, frameskip 4, sticky 0.25; {opts.steps} steps x {rounds} rounds, "
        "median CPU time of this process per agent step; idle steps: RAM observation, "
        "emulator at its frame limit."
    )
    return section
