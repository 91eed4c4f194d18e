"""Throughput vs number of sessions, with the vector client, against in-process ALE."""

from __future__ import annotations

import importlib
import time
from typing import Any

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


def _batched(
    server: LocalServerProvider, work: Workload, n: int, total: int, busy_poll: float = 0.0
) -> tuple[int, float]:
    """(env steps, seconds): ``step(actions)`` on all `n` sessions until `total` env steps."""
    batches = max(3, -(-total // n))
    actions = np.random.default_rng(work.seed).integers(0, work.n_actions, size=(batches + 2, n))
    with _vector(server.url, work, n) as venv:
        venv.reset(seed=work.seed)
        settle(server)
        venv.step(actions[0])
        venv.step(actions[1])
        start = time.perf_counter()
        for batch in actions[2:]:
            venv.step(batch)
        elapsed = time.perf_counter() - start
    return batches * n, elapsed


def _pipelined(
    server: LocalServerProvider, work: Workload, n: int, total: int, busy_poll: float = 0.0
) -> tuple[int, float]:
    """(env steps, seconds): EnvPool-style ``send``/``recv``, each env resent as soon as it answers.

    With `busy_poll` the client spins on its sockets instead of sleeping (it has
    a core of its own), which spares the server a wake-up of the client per reply.
    """
    total = max(total, 3 * n)
    actions = np.random.default_rng(work.seed).integers(0, work.n_actions, size=total + 4 * n)
    used = 0

    def take(k: int) -> np.ndarray[Any, Any]:
        nonlocal used
        used += k
        return actions[used - k : used]

    with _vector(server.url, work, n, busy_poll=busy_poll) as venv:
        venv.reset(seed=work.seed)
        settle(server)  # the opens emptied the warm pool: no ROM load while timing
        venv.send(take(n))
        done = 0
        start = time.perf_counter()
        while done < total:
            ids = venv.recv()[4]["env_id"]
            done += len(ids)
            venv.send(take(len(ids)), ids)
        elapsed = time.perf_counter() - start
        venv.recv(min_envs=n)
    return done, elapsed


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
    points = 1 + len(MODES) * len(opts.sessions)
    ctx.progress.start(section.title, len(works) * len(placements) * points)
    for placement in placements:
        for work in works:
            _curve(ctx, section, placement, work)
    section.notes.append(
        "vs in-process 1 core: aggregate steps/s over in-process ALE steps/s on one core "
        "(same game, options and seed), measured in the same run. With the split "
        "placement the send/recv client spins on its own core (busy_poll "
        f"{PIPELINE_BUSY_POLL * 1e3:g} ms) instead of sleeping between replies."
    )
    return section


def _curve(ctx: Context, section: Section, placement: Placement, work: Workload) -> None:
    opts = ctx.options
    base: dict[str, Any] = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
    ctx.progress.phase(f"in-process {work.label()}")
    with placement.client_side():
        reference = latency_row(inprocess_steps(work))["steps_per_s"]
    label = f"{work.label()} [{placement.name}]"
    # A client with a core of its own spins on send/recv rather than sleeping.
    busy_poll = PIPELINE_BUSY_POLL if placement.name == "split" else 0.0
    section.curves[f"in-process {work.obs_type}"] = [(n, reference) for n in opts.sessions]
    with our_server(placement) as server, placement.client_side():
        for mode, drive in MODES.items():
            curve = section.curves.setdefault(f"openenv-ws vector {mode} {label}", [])
            for n in opts.sessions:
                ctx.progress.phase(f"{mode}: {n} sessions {work.label()}")
                try:
                    steps, seconds = drive(server, work, n, opts.steps, busy_poll)
                except Exception as exc:  # noqa: BLE001 - one point failing keeps the curve
                    note = f"could not run: {type(exc).__name__}: {exc}".splitlines()[0]
                    section.add(**base, mode=mode, sessions=n, note=note)
                    continue
                rate = steps / seconds
                section.add(
                    **base,
                    mode=mode,
                    sessions=n,
                    steps=steps,
                    steps_per_s=rate,
                    batch_ms=seconds / (steps / n) * 1e3,
                    vs_inprocess=rate / reference,
                )
                curve.append((n, rate))
