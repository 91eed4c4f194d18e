"""Throughput vs number of sessions, with the vector client, against in-process ALE."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from openenv_ws.providers import LocalServerProvider

from ..measure import Placement, Workload, inprocess_steps, latency_row
from ..servers import our_server, settle
from ..suite import Column, Context, Section, has_attr, scenario

__all__: list[str] = []

COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("placement", "placement"),
    Column("mode", "mode"),
    Column("sessions", "sessions"),
    Column("steps", "env steps"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("batch_ms", "ms per round of all sessions", ".2f"),
    Column("vs_inprocess", "vs in-process 1 core", ".2f"),
    Column("note", "note"),
]


def _vector(url: str, work: Workload, n: int, **options: Any) -> Any:
    vector = importlib.import_module("openenv_ws.client.vector").VectorEnvClient
    # Opening and seeding hundreds of sessions loads as many ROMs (~0.1 s each on one core).
    return vector(url, n, config=work.config, open_timeout=None, timeout=600.0, **options)


class Point(NamedTuple):
    """One point of the curve: sessions, env steps per window, windows, client spin, and
    what to run before each window (the in-process reference, so that both see the
    machine at the same moments)."""

    n: int
    total: int
    rounds: int
    busy_poll: float
    before_window: Callable[[], None]


def _batched(server: LocalServerProvider, work: Workload, point: Point) -> tuple[int, float]:
    """(env steps, seconds) of the fastest of `rounds` windows of ``step(actions)`` on
    all `n` sessions, `total` env steps each."""
    n, total, rounds, _, before_window = point
    batches = max(3, -(-total // n))
    rng = np.random.default_rng(work.seed)
    best = (0, float("inf"))
    with _vector(server.url, work, n) as venv:
        venv.reset(seed=work.seed)
        settle(server)
        for batch in rng.integers(0, work.n_actions, size=(2, n)):
            venv.step(batch)
        for _ in range(max(1, rounds)):
            actions = rng.integers(0, work.n_actions, size=(batches, n))
            before_window()
            start = time.perf_counter()
            for batch in actions:
                venv.step(batch)
            best = min(best, (batches * n, time.perf_counter() - start), key=_per_step)
    return best


def _pipelined(server: LocalServerProvider, work: Workload, point: Point) -> tuple[int, float]:
    """(env steps, seconds) of the fastest of `rounds` windows of at least `total` env
    steps, EnvPool-style ``send``/``recv``: each env resent as soon as it answers.

    Each window starts with a request sent to every session and ends with every
    reply in. With `busy_poll` the client spins on its sockets instead of
    sleeping (it has a core of its own), which spares the server a wake-up of
    the client per reply.
    """
    n, total, rounds, busy_poll, before_window = point
    total = max(total, 3 * n)
    rng = np.random.default_rng(work.seed)
    best = (0, float("inf"))
    with _vector(server.url, work, n, busy_poll=busy_poll) as venv:
        venv.reset(seed=work.seed)
        settle(server)  # the opens emptied the warm pool: no ROM load while timing
        for _ in range(max(1, rounds)):
            before_window()
            venv.send(rng.integers(0, work.n_actions, n))
            done = 0
            start = time.perf_counter()
            while done < total:
                ids = venv.recv()[4]["env_id"]
                done += len(ids)
                venv.send(rng.integers(0, work.n_actions, len(ids)), ids)
            best = min(best, (done, time.perf_counter() - start), key=_per_step)
            venv.recv(min_envs=n)
    return best


def _per_step(window: tuple[int, float]) -> float:
    steps, seconds = window
    return seconds / steps if steps else float("inf")


#: Seconds the send/recv client spins before sleeping when it has a core of its own.
PIPELINE_BUSY_POLL = 0.002

#: mode -> how N sessions are driven.
MODES = {"step": _batched, "send/recv": _pipelined}


@scenario(
    "throughput",
    "Throughput vs sessions (vector client)",
    requires=has_attr("openenv_ws.client.vector", "VectorEnvClient", "the vector client"),
)
def run(ctx: Context) -> Section:
    """Aggregate steps/s of N sessions on one VectorEnvClient: batched step and send/recv."""
    opts = ctx.options
    section = Section("throughput", "Throughput vs sessions (vector client)", COLUMNS)
    works = list(ctx.workloads())
    placements = ctx.placements()[:1]
    points = len(MODES) * len(opts.sessions)
    ctx.progress.start(section.title, len(works) * len(placements) * points)
    for placement in placements:
        for work in works:
            _curve(ctx, section, placement, work)
    section.notes.append(
        "vs in-process 1 core: aggregate steps/s over in-process ALE steps/s on one core "
        "(same game, options and seed), measured in the same run: each point is the "
        f"fastest of {opts.rounds} timed windows on the same open sessions (after the warm "
        "pool refilled) over the fastest of the in-process runs made just before each of "
        "those windows, on the server's core while the server idles. With the split "
        "placement the send/recv client spins on its own core (busy_poll "
        f"{PIPELINE_BUSY_POLL * 1e3:g} ms) instead of sleeping between replies."
    )
    return section


def _curve(ctx: Context, section: Section, placement: Placement, work: Workload) -> None:
    opts = ctx.options
    base: dict[str, Any] = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
    label = f"{work.label()} [{placement.name}]"
    # A client with a core of its own spins on send/recv rather than sleeping.
    busy_poll = PIPELINE_BUSY_POLL if placement.name == "split" else 0.0
    references: list[float] = []
    line: dict[int, float] = {}

    def reference() -> None:
        # On the server's core, idle between windows: the core whose work is compared.
        with placement.server_side():
            references.append(latency_row(inprocess_steps(work))["steps_per_s"])

    with our_server(placement) as server, placement.client_side():
        for mode, drive in MODES.items():
            curve = section.curves.setdefault(f"openenv-ws vector {mode} {label}", [])
            for n in opts.sessions:
                ctx.progress.phase(f"{mode}: {n} sessions {work.label()}")
                references.clear()
                try:
                    steps, seconds = drive(
                        server, work, Point(n, opts.steps, opts.rounds, busy_poll, reference)
                    )
                except Exception as exc:  # noqa: BLE001 - one point failing keeps the curve
                    note = f"could not run: {type(exc).__name__}: {exc}".splitlines()[0]
                    section.add(**base, mode=mode, sessions=n, note=note)
                    continue
                rate, ref = steps / seconds, max(references)
                line[n] = max(line.get(n, 0.0), ref)
                section.add(
                    **base,
                    mode=mode,
                    sessions=n,
                    steps=steps,
                    steps_per_s=rate,
                    batch_ms=seconds / (steps / n) * 1e3,
                    vs_inprocess=rate / ref,
                )
                curve.append((n, rate))
    section.curves[f"in-process {work.obs_type}"] = sorted(line.items())
