"""The HTTP fallback: one session over plain HTTP, next to the WebSocket client."""

from __future__ import annotations

import importlib
from functools import partial

from openenv_ws.client import EnvClient

from ..measure import best_of, inprocess_steps, latency_row
from ..servers import our_server
from ..suite import Context, Section, has_attr, scenario
from .latency import LATENCY_COLUMNS, compare_row, sync_steps

__all__: list[str] = []


@scenario(
    "http",
    "HTTP fallback step latency",
    requires=has_attr("openenv_ws.client", "HTTPEnvClient", "the HTTP fallback client"),
)
def run(ctx: Context) -> Section:
    """``HTTPEnvClient`` (stateful HTTP sessions) vs the WebSocket client and in-process ALE."""
    http_client = importlib.import_module("openenv_ws.client").HTTPEnvClient
    opts = ctx.options
    section = Section("http", "HTTP fallback step latency", LATENCY_COLUMNS)
    placement = ctx.placements()[0]
    works = list(ctx.workloads())
    ctx.progress.start(section.title, 3 * len(works))
    with our_server(placement) as server, placement.client_side():
        for work in works:
            base = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
            ctx.progress.phase(f"in-process {work.label()}")
            reference = latency_row(best_of(opts.rounds, partial(inprocess_steps, work)))
            section.add(**base, path="in-process", **reference, vs_inprocess=1.0, overhead_us=0.0)
            for path, url, client in (
                ("openenv-ws sync (WebSocket)", server.url, None),
                ("openenv-ws HTTP fallback", server.http_url, http_client),
            ):
                ctx.progress.phase(f"{path} {work.label()}")
                measure = partial(sync_steps, url, work, client or EnvClient)
                samples = best_of(opts.rounds, measure)
                section.add(**base, path=path, **compare_row(samples, reference))
                section.sample(work.obs_type, path, samples)
    return section
