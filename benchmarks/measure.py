"""Measuring tools shared by the scenarios: workloads, timed loops, core placement, RSS.

Every contender of a scenario plays the same :class:`Workload` (game, options,
seed, action sequence). Step loops time each call with ``perf_counter`` and
leave resets out of the timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from openenv_ws.environment import DiscreteSpec

__all__ = [
    "Placement",
    "Workload",
    "cpu_model",
    "inprocess_steps",
    "latency_row",
    "median_us",
    "n_actions",
    "pin_process",
    "raw_ale",
    "rss_bytes",
    "time_steps",
    "time_steps_async",
]


@dataclass(frozen=True)
class Workload:
    """One game and observation type, a seed and the actions to play."""

    game: str
    obs_type: str
    seed: int
    actions: tuple[int, ...]
    n_actions: int

    @classmethod
    def make(cls, game: str, obs_type: str, seed: int, steps: int) -> Workload:
        from atari import AtariEnvironment
        from openenv_ws.environment import DiscreteSpec

        env = AtariEnvironment({"game": game, "obs_type": obs_type})
        spec = env.spec.action
        env.close()
        assert isinstance(spec, DiscreteSpec)
        n = spec.n
        actions = np.random.default_rng(seed).integers(0, n, size=steps).tolist()
        return cls(game, obs_type, seed, tuple(actions), n)

    @property
    def config(self) -> dict[str, Any]:
        """The session config (all other options at ``ALE/<Game>-v5`` defaults)."""
        return {"game": self.game, "obs_type": self.obs_type}

    @property
    def warmup(self) -> tuple[int, ...]:
        return self.actions[: min(50, max(1, len(self.actions) // 10))]

    def label(self) -> str:
        return f"{self.game} {self.obs_type}"


def time_steps(
    step: Callable[[int], bool], reset: Callable[[], object], actions: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """Seconds per ``step(action)`` call; ``step`` returns done, then ``reset`` runs untimed."""
    clock = time.perf_counter
    out = np.empty(len(actions))
    for i, action in enumerate(actions):
        t0 = clock()
        done = step(action)
        out[i] = clock() - t0
        if done:
            reset()
    return out


#: Seconds of untimed steps before a timed run: long enough for an idle core to be
#: running at its usual speed again (a few hundred steps are not, on a shared host).
WARM_SECONDS = 0.3


def warm_up(
    step: Callable[[int], bool], reset: Callable[[], object], actions: tuple[int, ...]
) -> None:
    """:func:`time_steps` over `actions` again and again, for :data:`WARM_SECONDS` at least."""
    end = time.perf_counter() + WARM_SECONDS
    while True:
        time_steps(step, reset, actions)
        if time.perf_counter() >= end:
            return


async def warm_up_async(
    step: Callable[[int], Awaitable[bool]],
    reset: Callable[[], Awaitable[object]],
    actions: tuple[int, ...],
) -> None:
    """:func:`warm_up` for coroutines."""
    end = time.perf_counter() + WARM_SECONDS
    while True:
        await time_steps_async(step, reset, actions)
        if time.perf_counter() >= end:
            return


async def time_steps_async(
    step: Callable[[int], Awaitable[bool]],
    reset: Callable[[], Awaitable[object]],
    actions: tuple[int, ...],
) -> np.ndarray[Any, Any]:
    """:func:`time_steps` for coroutines."""
    clock = time.perf_counter
    out = np.empty(len(actions))
    for i, action in enumerate(actions):
        t0 = clock()
        done = await step(action)
        out[i] = clock() - t0
        if done:
            await reset()
    return out


def run_async(coro: Awaitable[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """Run `coro` on a fresh event loop (uvloop when installed, as the server does)."""
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)  # type: ignore[arg-type]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type]


def inprocess_steps(work: Workload) -> np.ndarray[Any, Any]:
    """The reference: :class:`atari.AtariEnvironment` stepped in this process."""
    from atari import AtariEnvironment

    env = AtariEnvironment(work.config)
    try:
        env.reset(seed=work.seed)
        time_steps(lambda a: env.step(a).done, env.reset, work.warmup)
        env.reset(seed=work.seed)
        return time_steps(lambda a: env.step(a).done, env.reset, work.actions)
    finally:
        env.close()


def latency_row(samples: np.ndarray[Any, Any]) -> dict[str, float]:
    """p50/p90/p99/max/mean in microseconds and steps/s over the timed calls."""
    us = samples * 1e6
    p50, p90, p99 = np.percentile(us, [50, 90, 99])
    return {
        "p50_us": float(p50),
        "p90_us": float(p90),
        "p99_us": float(p99),
        "max_us": float(us.max()),
        "mean_us": float(us.mean()),
        "steps_per_s": float(len(us) / samples.sum()),
    }


def median_us(fn: Callable[[], Any], repeats: int, number: int) -> float:
    """Median over `repeats` batches of the per-call time of `fn`, in microseconds."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def best_of(rounds: int, measure: Callable[[], np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """The round with the lowest median (other load on the machine only ever adds time)."""
    best: np.ndarray[Any, Any] | None = None
    for _ in range(max(1, rounds)):
        samples = measure()
        if best is None or np.median(samples) < np.median(best):
            best = samples
    assert best is not None
    return best


# ---------------------------------------------------------------------- placement


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Placement:
    """Which cores the server and the client (and the in-process reference) run on.

    - ``split``: server on one core, client on another (a wake-up crosses cores);
    - ``shared``: both on the same core (a blocked client hands the core to the server);
    - ``any``: the OS decides.

    Cross-core wake-ups cost tens of microseconds on some VMs, so single-session
    latency depends on this more than on anything in the runtime.
    """

    name: str
    server: frozenset[int] | None
    client: frozenset[int] | None

    @classmethod
    def named(cls, name: str) -> Placement:
        cores = _cores()
        if name == "any" or (name == "split" and len(cores) < 2):
            return cls("any" if name == "any" else "any (1 core)", None, None)
        if name == "split":
            return cls(name, frozenset({cores[0]}), frozenset({cores[1]}))
        if name == "shared":
            return cls(name, frozenset({cores[-1]}), frozenset({cores[-1]}))
        raise ValueError(f"unknown placement {name!r}; choose split, shared or any")

    def describe(self) -> str:
        if self.server is None:
            return self.name
        return f"{self.name} (server cpu {_set(self.server)}, client cpu {_set(self.client)})"

    def pin_server(self, pid: int) -> None:
        if self.server is not None:
            pin_process(pid, self.server)

    def client_side(self) -> contextlib.AbstractContextManager[None]:
        """Run the calling thread on the client cores for the duration."""
        return _running_on(self.client)

    def server_side(self) -> contextlib.AbstractContextManager[None]:
        """Run the calling thread on the server cores for the duration (a reference of
        what the server's core does alone, measured while the server idles)."""
        return _running_on(self.server)


@contextlib.contextmanager
def _running_on(cores: frozenset[int] | None) -> Iterator[None]:
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _set(cores: frozenset[int] | None) -> str:
    return ",".join(map(str, sorted(cores or ())))


def pin_process(pid: int, cores: frozenset[int] | set[int]) -> None:
    """Pin every thread of process `pid` (threads started later inherit it)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cores)


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid`."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.Process(pid).memory_info().rss)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def n_actions(action: object) -> int:
    """The number of actions of a session's action spec (the benchmarks play discrete games)."""
    if not isinstance(action, DiscreteSpec):
        raise ValueError(f"the benchmarks play discrete actions, not {action}")
    return action.n


def raw_ale(game: str) -> tuple[Any, str]:
    """A bare ``ale_py.ALEInterface`` with AtariEnvironment's default sticky actions and
    frame limit, and the path of `game`'s ROM, not loaded yet."""
    import ale_py
    from ale_py import roms

    from atari.config import DEFAULT_CONFIG

    ale = ale_py.ALEInterface()
    ale.setFloat("repeat_action_probability", DEFAULT_CONFIG["repeat_action_probability"])
    ale.setInt("max_num_frames_per_episode", DEFAULT_CONFIG["max_num_frames_per_episode"])
    rom = roms.get_rom_path(game)
    if rom is None:
        raise ValueError(f"ale-py ships no ROM for {game!r}")
    return ale, str(rom)
