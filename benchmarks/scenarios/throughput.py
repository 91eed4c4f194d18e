"""Throughput vs number of sessions, with the vector client, against in-process ALE."""

from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np

from ..measure import Placement, Workload, inprocess_steps, latency_row
from ..servers import our_server
from ..suite import Column, Context, Section, has_attr, scenario

__all__: list[str] = []

COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("placement", "placement"),
    Column("sessions", "sessions"),
    Column("steps", "env steps"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("batch_ms", "batch step ms", ".2f"),
    Column("vs_inprocess", "vs in-process 1 core", ".2f"),
]


def _vector_steps(url: str, work: Workload, n: int, total: int) -> tuple[int, float]:
    """(env steps, seconds) for batched steps of `n` sessions until `total` env steps."""
    vector = importlib.import_module("openenv_ws.client.vector").VectorEnvClient
    batches = max(3, -(-total // n))
    actions = np.random.default_rng(work.seed).integers(0, work.n_actions, size=(batches + 2, n))
    with vector(url, n, config=work.config) as venv:
        venv.reset(seed=work.seed)
        venv.step(actions[0])
        venv.step(actions[1])
        start = time.perf_counter()
        for batch in actions[2:]:
            venv.step(batch)
        elapsed = time.perf_counter() - start
    return batches * n, elapsed


@scenario(
    "throughput",
    "Throughput vs sessions (vector client)",
    requires=has_attr("openenv_ws.client.vector", "VectorEnvClient", "the vector client"),
)
def run(ctx: Context) -> Section:
    """Aggregate steps/s of N sessions stepped in batches by one VectorEnvClient."""
    opts = ctx.options
    section = Section("throughput", "Throughput vs sessions (vector client)", COLUMNS)
    works = list(ctx.workloads())
    placements = ctx.placements()
    ctx.progress.start(section.title, len(works) * len(placements) * (1 + len(opts.sessions)))
    for placement in placements:
        for work in works:
            _curve(ctx, section, placement, work)
    section.notes.append(
        "vs in-process 1 core: aggregate steps/s over in-process ALE steps/s on one core "
        "(same game, options and seed), measured in the same run."
    )
    return section


def _curve(ctx: Context, section: Section, placement: Placement, work: Workload) -> None:
    opts = ctx.options
    base: dict[str, Any] = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
    ctx.progress.phase(f"in-process {work.label()}")
    with placement.client_side():
        reference = latency_row(inprocess_steps(work))["steps_per_s"]
    label = f"{work.label()} [{placement.name}]"
    section.curves[f"in-process {work.obs_type}"] = [(n, reference) for n in opts.sessions]
    curve = section.curves.setdefault(f"openenv-ws vector {label}", [])
    with our_server(placement) as server, placement.client_side():
        for n in opts.sessions:
            ctx.progress.phase(f"{n} sessions {work.label()}")
            steps, seconds = _vector_steps(server.url, work, n, opts.steps)
            rate = steps / seconds
            section.add(
                **base,
                sessions=n,
                steps=steps,
                steps_per_s=rate,
                batch_ms=seconds / (steps / n) * 1e3,
                vs_inprocess=rate / reference,
            )
            curve.append((n, rate))
