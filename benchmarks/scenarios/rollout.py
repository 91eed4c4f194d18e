"""Rollout throughput: N Atari envs with random actions, every way of batching them.

For each setting and N, every contender steps N envs of the same game with
the same options and random actions, back to back for a time-boxed window
after a warm-up; env steps/s = batches x batch size / seconds. Contenders:

- in-process: ale-py's ``AtariVectorEnv`` (C++ threads, one per usable core),
  EnvPool (as many threads), Gymnasium's ``AsyncVectorEnv`` and
  ``SyncVectorEnv`` of ``gym.make("ALE/<Game>-v5")`` (with
  ``AtariPreprocessing`` + ``FrameStackObservation`` on a frameskip-1 base
  when the setting preprocesses);
- ours: N single sessions on one ``VectorEnvClient`` (``serve --workers 1``
  and ``2``), and one vector session of N envs (``VectorSessionClient``, the
  engine with one thread per usable core): synchronous ``step`` and
  EnvPool-style ``send``/``recv`` with batches of N/2;
- the floor: the in-process row's engine behind a bare server
  (:mod:`benchmarks.peers.bare_vector`), ``step`` and ``send``/``recv``: the
  most any server on that engine could show in the same run.

Nothing is pinned: every contender may use every core, as a rollout would.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from openenv_ws.client.vector import VectorEnvClient

from ..measure import Placement
from ..peers.bare_vector import bare_server
from ..servers import our_server
from ..suite import Column, Context, Section, scenario

__all__ = ["SETTINGS", "Cell", "Setting", "Unavailable", "ale_options", "envpool_options"]

COLUMNS = [
    Column("setting", "setting"),
    Column("envs", "N"),
    Column("path", "contender"),
    Column("batch", "batch"),
    Column("obs", "obs per env"),
    Column("steps", "env steps"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("vs_atari", "vs AtariVectorEnv", ".2f"),
    Column("vs_envpool", "vs EnvPool", ".2f"),
    Column("vs_async", "vs AsyncVectorEnv", ".2f"),
    Column("note", "note"),
]


@dataclass(frozen=True)
class Setting:
    """A named session config (without the game), the options every contender gets."""

    name: str
    config: Mapping[str, Any]


#: (a) native RGB frames, nothing but frameskip and sticky actions; (b) the usual
#: Atari recipe: 84x84 grayscale, a stack of 4, max-pool of the last two frames,
#: up to 30 no-ops after each reset. Episodic life, reward clipping and fire reset
#: are off for every contender in both.
SETTINGS = (
    Setting(
        "RGB 210x160",
        {"obs_type": "rgb", "frameskip": 4, "repeat_action_probability": 0.25},
    ),
    Setting(
        "84x84 gray, stack 4, max-pool, noop 30",
        {
            "obs_type": "grayscale",
            "frameskip": 4,
            "repeat_action_probability": 0.25,
            "img_height": 84,
            "img_width": 84,
            "stack_num": 4,
            "maxpool": True,
            "noop_max": 30,
        },
    ),
)


def ale_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """``AtariVectorEnv`` keyword arguments for a session config (the same names)."""
    return {
        "img_height": config.get("img_height") or 210,
        "img_width": config.get("img_width") or 160,
        "grayscale": config["obs_type"] == "grayscale",
        "stack_num": config.get("stack_num", 1),
        "maxpool": config.get("maxpool", False),
        "noop_max": config.get("noop_max", 0),
        "frameskip": config["frameskip"],
        "repeat_action_probability": config["repeat_action_probability"],
        "episodic_life": False,
        "reward_clipping": False,
        "use_fire_reset": False,
    }


def envpool_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """``envpool.make`` keyword arguments for a session config.

    EnvPool always max-pools the last two frames of a step, and does at least
    one no-op after a reset: ``noop_max=0`` crashes 1.2.5 (its no-op count is
    drawn from ``[0, noop_max - 1]``), so 0 becomes 1.
    """
    ale = ale_options(config)
    return {
        "img_height": ale["img_height"],
        "img_width": ale["img_width"],
        "gray_scale": ale["grayscale"],
        "stack_num": ale["stack_num"],
        "noop_max": max(1, ale["noop_max"]),
        "frame_skip": ale["frameskip"],
        "repeat_action_probability": ale["repeat_action_probability"],
        "episodic_life": False,
        "reward_clip": False,
        "use_fire_reset": False,
    }


def _preprocesses(config: Mapping[str, Any]) -> bool:
    ale = ale_options(config)
    native = (ale["img_height"], ale["img_width"]) == (210, 160)
    return not native or ale["stack_num"] > 1 or ale["maxpool"] or ale["noop_max"] > 0


def _camel(game: str) -> str:
    return "".join(part.capitalize() for part in game.split("_"))


def gym_env(game: str, config: Mapping[str, Any]) -> Any:
    """One Gymnasium env of `game` with `config`'s options.

    Without preprocessing: ``gym.make("ALE/<Game>-v5")`` with the setting's
    frameskip. With it: a frameskip-1 base of the same obs type (Atari-
    Preprocessing reads the screen from ALE itself), ``AtariPreprocessing``
    doing the frameskip, max-pool, resize and no-ops, and
    ``FrameStackObservation``.
    """
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    ale = ale_options(config)
    make = {
        "obs_type": config["obs_type"],
        "repeat_action_probability": ale["repeat_action_probability"],
    }
    if not _preprocesses(config):
        return gym.make(f"ALE/{_camel(game)}-v5", frameskip=ale["frameskip"], **make)
    env = AtariPreprocessing(
        gym.make(f"ALE/{_camel(game)}-v5", frameskip=1, **make),
        noop_max=ale["noop_max"],
        frame_skip=ale["frameskip"],
        screen_size=(ale["img_width"], ale["img_height"]),
        terminal_on_life_loss=False,
        grayscale_obs=ale["grayscale"],
        scale_obs=False,
    )
    return FrameStackObservation(env, ale["stack_num"]) if ale["stack_num"] > 1 else env


class Unavailable(Exception):
    """A contender cannot run on this machine or build; the message says why."""


@dataclass(frozen=True)
class Cell:
    """One block of the table: a setting, N envs, and what every contender shares."""

    setting: Setting
    game: str
    n: int
    seed: int
    n_actions: int
    threads: int

    @property
    def config(self) -> dict[str, Any]:
        return {"game": self.game, **self.setting.config}

    def actions(self, batch: int) -> Iterator[np.ndarray[Any, Any]]:
        """Random actions for batches of `batch` envs, the same for every contender."""
        rng = np.random.default_rng(self.seed)
        return itertools.cycle(list(rng.integers(0, self.n_actions, size=(64, batch))))


#: One batch: steps it and returns how many env steps that was.
Batch = Callable[[], int]
#: An opened contender: its batch, and the shape of one env's observation.
Opened = tuple[Batch, tuple[int, ...]]


@contextlib.contextmanager
def _stepping(envs: Any, cell: Cell, **reset: Any) -> Iterator[Opened]:
    """Batches of ``envs.step`` (any vector env with reset, step and close) on all N
    envs, after ``envs.reset(**reset)``; `envs` is closed at the end."""
    try:
        obs = envs.reset(**reset)[0]
        actions = cell.actions(cell.n)

        def batch() -> int:
            envs.step(next(actions))
            return cell.n

        yield batch, obs.shape[1:]
    finally:
        envs.close()


def ale_vector(cell: Cell) -> contextlib.AbstractContextManager[Opened]:
    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError as exc:
        raise Unavailable(f"this ale-py has no AtariVectorEnv ({exc})") from None
    options = ale_options(cell.config)
    envs = AtariVectorEnv(cell.game, cell.n, num_threads=cell.threads, **options)
    return _stepping(envs, cell, seed=cell.seed)


def envpool_vector(cell: Cell) -> contextlib.AbstractContextManager[Opened]:
    try:
        envpool = importlib.import_module("envpool")
    except Exception as exc:  # noqa: BLE001 - any import failure is the row's reason
        raise Unavailable(f"envpool does not import: {type(exc).__name__}: {exc}") from None
    envs = envpool.make(
        f"{_camel(cell.game)}-v5",
        env_type="gymnasium",
        num_envs=cell.n,
        num_threads=cell.threads,
        seed=cell.seed,
        **envpool_options(cell.config),
    )
    return _stepping(envs, cell)


def gym_vector(cell: Cell, asynchronous: bool) -> contextlib.AbstractContextManager[Opened]:
    import gymnasium as gym

    config = cell.config
    fns = [lambda: gym_env(cell.game, config)] * cell.n
    envs = gym.vector.AsyncVectorEnv(fns) if asynchronous else gym.vector.SyncVectorEnv(fns)
    return _stepping(envs, cell, seed=cell.seed)


def per_session(cell: Cell, url: str) -> contextlib.AbstractContextManager[Opened]:
    envs = VectorEnvClient(url, cell.n, config=cell.config, open_timeout=None)
    return _stepping(envs, cell, seed=cell.seed)


def vector_session(
    cell: Cell, url: str, batch_size: int
) -> contextlib.AbstractContextManager[Opened]:
    client = getattr(importlib.import_module("openenv_ws.client"), "VectorSessionClient", None)
    if client is None:
        raise Unavailable("not built (openenv_ws.client.VectorSessionClient)")
    config = {**cell.config, "num_threads": cell.threads}
    envs = client(url, cell.n, config=config, batch_size=batch_size)
    if batch_size == cell.n:
        return _stepping(envs, cell, seed=cell.seed)
    return _pipelined(envs, cell, batch_size)


@contextlib.contextmanager
def floor_vector(cell: Cell, batch_size: int) -> Iterator[Opened]:
    """The engine of ``in-process AtariVectorEnv`` behind a bare server
    (:mod:`benchmarks.peers.bare_vector`): the most a server on it could show in this run."""
    options = ale_options(cell.config)
    with bare_server(cell.game, cell.n, batch_size, cell.seed, cell.threads, options) as opened:
        step, shape = opened
        actions = cell.actions(batch_size)

        def batch() -> int:
            step(next(actions))
            return batch_size

        yield batch, shape


@contextlib.contextmanager
def _pipelined(envs: Any, cell: Cell, batch_size: int) -> Iterator[Opened]:
    """EnvPool-style batches: actions for the envs of the last batch, then the next
    `batch_size` envs that are ready."""
    try:
        obs = envs.reset(seed=cell.seed)[0]
        actions = cell.actions(batch_size)

        def batch() -> int:
            envs.send(next(actions))
            envs.recv()
            return batch_size

        yield batch, obs.shape[1:]
    finally:
        envs.close()


def timed(batch: Batch, seconds: float) -> tuple[int, float]:
    """(env steps, seconds) of batches back to back for `seconds`, after a warm-up of a
    quarter of that (two batches at least), which is left out."""
    clock = time.perf_counter
    warm = clock() + seconds / 4
    batch()
    batch()
    while clock() < warm:
        batch()
    steps, start = 0, clock()
    while True:
        steps += batch()
        now = clock()
        if now - start >= seconds:
            return steps, now - start


#: Reference rows the ratios are taken against: column -> contender.
REFERENCES = {
    "vs_atari": "in-process AtariVectorEnv",
    "vs_envpool": "EnvPool",
    "vs_async": "Gymnasium AsyncVectorEnv",
}

#: What a vector session should reach on a 2-core machine: column -> ratio.
TARGETS = {"vs_atari": 0.9, "vs_envpool": 1.1, "vs_async": 1.5}

#: The label of the floor rows (ale-py's engine behind a bare server).
FLOOR = "floor: AtariVectorEnv in a bare server"


def _best(rows: Mapping[str, Mapping[str, Any]], part: str) -> Mapping[str, Any]:
    """The fastest of the rows whose label contains `part`."""
    found = [r for label, r in rows.items() if part in label]
    return max(found, key=lambda r: r.get("steps_per_s") or 0.0)


def _ratios(row: Mapping[str, Any]) -> list[str]:
    return [
        f"{'n/a' if row.get(key) is None else format(row[key], '.2f') + 'x'} {REFERENCES[key]}"
        for key in TARGETS
    ]


def _verdict(cell: Cell, rows: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: the vector session's best row against each target, and the floor's."""
    best, floor = _best(rows, "VectorSessionClient"), _best(rows, FLOOR)
    parts = [
        f"{seen} (target {target:g}x)"
        for seen, target in zip(_ratios(best), TARGETS.values(), strict=True)
    ]
    where = f"{cell.setting.name}, N={cell.n}, vector session at its best ({best['path']})"
    return (
        f"{where}: {', '.join(parts)}; the floor at its best ({floor['path']}), the most "
        f"a server on this engine showed in this run: {', '.join(_ratios(floor))}"
    )


def _contenders(
    cell: Cell, urls: Mapping[int, str]
) -> list[tuple[str, int, Callable[[], contextlib.AbstractContextManager[Opened]]]]:
    """(label, batch size, how to open it) for every row of `cell`, in table order."""
    half = max(1, cell.n // 2)
    return [
        ("in-process AtariVectorEnv", cell.n, lambda: ale_vector(cell)),
        ("EnvPool", cell.n, lambda: envpool_vector(cell)),
        ("Gymnasium AsyncVectorEnv", cell.n, lambda: gym_vector(cell, True)),
        ("Gymnasium SyncVectorEnv", cell.n, lambda: gym_vector(cell, False)),
        ("openenv-ws VectorEnvClient.step, serve --workers 1", cell.n,
         lambda: per_session(cell, urls[1])),
        ("openenv-ws VectorEnvClient.step, serve --workers 2", cell.n,
         lambda: per_session(cell, urls[2])),
        ("openenv-ws VectorSessionClient.step", cell.n,
         lambda: vector_session(cell, urls[1], cell.n)),
        ("openenv-ws VectorSessionClient send/recv", half,
         lambda: vector_session(cell, urls[1], half)),
        (f"{FLOOR}, step", cell.n, lambda: floor_vector(cell, cell.n)),
        (f"{FLOOR}, send/recv", half, lambda: floor_vector(cell, half)),
    ]  # fmt: skip


#: Rounds per cell: every row is timed once per round, the rows in turn, so that a
#: slow or fast spell of a shared machine falls on all of them alike.
ROUNDS = 3


def _measure_cell(
    contenders: list[tuple[str, int, Callable[[], contextlib.AbstractContextManager[Opened]]]],
    seconds: float,
    phase: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Every contender of a cell opened at once (idle ones cost no CPU), then
    :data:`ROUNDS` rounds of ``seconds / ROUNDS`` per row; a row's figure is its
    median round."""
    out: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        running: dict[str, tuple[Batch, tuple[int, ...]]] = {}
        for label, _, open_ in contenders:
            phase(f"opening {label}")
            try:
                running[label] = stack.enter_context(open_())
            except Unavailable as exc:
                out[label] = {"note": f"unavailable: {exc}"}
            except Exception as exc:  # noqa: BLE001 - one row failing keeps the others
                out[label] = {"note": f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:200]}
        rates: dict[str, list[tuple[int, float]]] = {label: [] for label in running}
        for r in range(ROUNDS):
            for label, (batch, _) in running.items():
                if label in out:
                    continue
                phase(f"round {r + 1}/{ROUNDS}: {label}")
                try:
                    rates[label].append(timed(batch, seconds / ROUNDS))
                except Exception as exc:  # noqa: BLE001
                    out[label] = {"note": f"failed: {type(exc).__name__}: {exc}"[:200]}
        for label, (_, shape) in running.items():
            if label in out:
                continue
            steps, elapsed = sorted(rates[label], key=lambda se: se[0] / se[1])[ROUNDS // 2]
            out[label] = {
                "obs": "x".join(map(str, shape)),
                "steps": sum(st for st, _ in rates[label]),
                "steps_per_s": steps / elapsed,
            }
    return out


def _phase(ctx: Context, prefix: str, what: str) -> None:
    ctx.progress.phase(prefix + what)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@scenario(
    "rollout",
    "Rollout throughput: vector sessions vs AtariVectorEnv, EnvPool, Gymnasium",
    default=False,
)
def run(ctx: Context) -> Section:
    """N envs with random actions: in-process AtariVectorEnv, EnvPool, Gymnasium, ours."""
    opts = ctx.options
    section = Section(
        "rollout", "Rollout throughput: vector sessions vs AtariVectorEnv, EnvPool, Gymnasium",
        COLUMNS,
    )  # fmt: skip
    game, threads = opts.games[0], len(os.sched_getaffinity(0))
    n_actions = ctx.workload(game, "rgb", steps=1).n_actions
    cells = [
        Cell(setting, game, n, opts.seed, n_actions, threads)
        for setting in SETTINGS
        for n in opts.rollout_envs
    ]
    ctx.progress.start(section.title, len(cells) * 10 * (ROUNDS + 1))
    load = os.getloadavg()[0]
    placement = Placement.named("any")
    serve = ["--no-web", "--pool-size", "0", "--workers"]
    with (
        our_server(placement, [*serve, "1"]) as one,
        our_server(placement, [*serve, "2"]) as two,
    ):
        urls = {1: one.url, 2: two.url}
        verdicts: list[str] = []
        for cell in cells:
            contenders = _contenders(cell, urls)
            measured = _measure_cell(
                contenders,
                opts.rollout_seconds,
                functools.partial(_phase, ctx, f"{cell.setting.name}, N={cell.n}: "),
            )
            rows = {}
            for label, batch, _ in contenders:
                rows[label] = section.add(
                    setting=cell.setting.name, envs=cell.n, path=label, batch=batch,
                    **measured[label],
                )  # fmt: skip
            for row in rows.values():
                for key, ref in REFERENCES.items():
                    if row.get("steps_per_s") and rows[ref].get("steps_per_s"):
                        row[key] = row["steps_per_s"] / rows[ref]["steps_per_s"]
            verdicts.append(_verdict(cell, rows))
    section.notes += [
        f"{game}, random actions (the same draws for every contender), sticky actions 0.25, "
        f"frameskip 4; each row timed in {ROUNDS} rounds of {opts.rollout_seconds / ROUNDS:.3g} s "
        "(after a warm-up of a quarter of that), the rows of a setting and N in turn in each "
        "round, their envs all open; a row's figure is its median round; set-up left out; "
        "env steps/s = batches x batch size / seconds. env steps: all rounds. "
        f"{threads} threads for AtariVectorEnv, EnvPool {_version('envpool')} and the vector "
        f"session's engine (the usable cores); nothing pinned. Load average (1 min) "
        f"{load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end: figures measured "
        "on a busy machine are not claims.",
        "Setting b: AtariVectorEnv's and EnvPool's options, Gymnasium's AtariPreprocessing "
        "(frame_skip 4, noop_max 30) on a frameskip-1 base of the same obs type + "
        "FrameStackObservation(4), our config keys (img_height/img_width 84, grayscale, "
        "stack_num 4, maxpool, noop_max 30). Episodic life, reward clipping and fire "
        "reset are off everywhere.",
        "EnvPool always max-pools the last two frames and does at least one no-op after a "
        "reset (noop_max=0 crashes 1.2.5), so in setting a it runs with noop_max=1 and a "
        "max-pool the others skip; its RGB frames are channel-first.",
        "Ours: VectorEnvClient.step over N single sessions (serve --workers 1 and 2), and "
        "one vector session of N envs on serve --workers 1 (VectorSessionClient: step, "
        "and send/recv with batch_size N/2). Targets on a 2-core machine: a vector session "
        "at 0.9x AtariVectorEnv or better, 1.1x EnvPool or better, 1.5x AsyncVectorEnv "
        "or better.",
        f"{FLOOR}: a server process holding AtariVectorEnv engines with the same options "
        "and threads (one for step, two of N/2 taken in turn for send/recv, as a vector "
        "session), reading the actions from a loopback TCP socket, copying the observations "
        "into a shared mapping and writing a fixed-size reply (rewards, flags); the client "
        "copies the observations out. No framing, encoding, checks or infos: the least any "
        "server on this engine does to hand another process fresh arrays.",
        *verdicts,
    ]
    return section
