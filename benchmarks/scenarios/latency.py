"""Single-session step latency: the sync and async clients against in-process ALE."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from openenv_ws.client import AsyncEnvClient, EnvClient

from ..measure import (
    Placement,
    Workload,
    best_of,
    inprocess_steps,
    latency_row,
    run_async,
    time_steps,
    time_steps_async,
)
from ..servers import our_server, settle
from ..suite import Column, Context, Section, scenario

__all__ = [
    "KEY_COLUMNS",
    "LATENCY_COLUMNS",
    "PERCENTILE_COLUMNS",
    "Window",
    "compare_row",
    "no_window",
    "polling_pays",
    "remote_steps",
]

#: Which measurement a row is.
KEY_COLUMNS = [
    Column("game", "game"),
    Column("obs", "obs"),
    Column("path", "path"),
    Column("placement", "placement"),
]
PERCENTILE_COLUMNS = [
    Column("p50_us", "p50 µs", ",.0f"),
    Column("p90_us", "p90 µs", ",.0f"),
    Column("p99_us", "p99 µs", ",.0f"),
    Column("max_us", "max µs", ",.0f"),
]
LATENCY_COLUMNS = [
    *KEY_COLUMNS,
    *PERCENTILE_COLUMNS,
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("vs_inprocess", "vs in-process", ".2f"),
    Column("overhead_us", "overhead µs/step", ".0f"),
]


def no_window(env: object) -> contextlib.AbstractContextManager[object]:
    """The default `window` of the step loops: nothing around the timed steps."""
    return contextlib.nullcontext()


#: ``window(client)``: a context manager held around the timed steps only (warm-up excluded).
Window = Callable[[Any], contextlib.AbstractContextManager[object]]


def sync_steps(
    url: str,
    work: Workload,
    client: type[Any] = EnvClient,
    *,
    window: Window = no_window,
    **options: Any,
) -> np.ndarray[Any, Any]:
    """Per-step seconds of `client` (a blocking client class such as :class:`EnvClient`,
    made with `options`) playing `work`; ``window(env)`` is held around the timed steps."""
    env: Any
    with client(url, config=work.config, **options) as env:
        env.reset(seed=work.seed)
        time_steps(lambda a: env.step(a).done, env.reset, work.warmup)
        env.reset(seed=work.seed)
        with window(env):
            return time_steps(lambda a: env.step(a).done, env.reset, work.actions)


def async_steps(url: str, work: Workload) -> np.ndarray[Any, Any]:
    """Per-step seconds of :class:`AsyncEnvClient` playing `work`."""

    async def play() -> np.ndarray[Any, Any]:
        env: AsyncEnvClient[Any]
        async with AsyncEnvClient(url, config=work.config) as env:

            async def step(a: int) -> bool:
                return (await env.step(a)).done

            await env.reset(seed=work.seed)
            await time_steps_async(step, env.reset, work.warmup)
            await env.reset(seed=work.seed)
            return await time_steps_async(step, env.reset, work.actions)

    return run_async(play())


#: Seconds both sides of the "sync-poll" row poll without sleeping.
BUSY_POLL = 0.002

#: client name -> how it plays a workload against a server URL. On this host the
#: clients get observations through shared memory; "sync-socket" is the sync
#: client with every byte through the socket, as for a remote server;
#: "sync-poll" is the sync client and a server (``--busy-poll``) that both poll
#: instead of sleeping between messages, for split cores only.
CLIENTS: dict[str, Callable[[str, Workload], np.ndarray[Any, Any]]] = {
    "sync": sync_steps,
    "sync-socket": partial(sync_steps, shared_memory=False),
    "async": async_steps,
    "sync-poll": partial(sync_steps, busy_poll=BUSY_POLL),
}
#: Clients that need their own server, started with these arguments.
SERVER_ARGS = {"sync-poll": ("--busy-poll", str(BUSY_POLL))}


def polling_pays(placement: Placement) -> bool:
    """Whether busy polling is measured at `placement`: only where each side has its own
    core (on a shared core the polling server would take the core from the client)."""
    return placement.server is not None and placement.server != placement.client


def clients_for(placement: Placement, clients: tuple[str, ...]) -> list[str]:
    """The clients measured at `placement` (see :func:`polling_pays`)."""
    return [c for c in clients if polling_pays(placement) or c not in SERVER_ARGS]


def remote_steps(client: str, url: str, work: Workload) -> np.ndarray[Any, Any]:
    try:
        return CLIENTS[client](url, work)
    except KeyError:
        raise ValueError(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}") from None


def compare_row(samples: np.ndarray[Any, Any], reference: dict[str, float]) -> dict[str, float]:
    """Latency stats of `samples` plus their ratio and overhead against `reference`."""
    row = latency_row(samples)
    row["vs_inprocess"] = row["steps_per_s"] / reference["steps_per_s"]
    row["overhead_us"] = row["mean_us"] - reference["mean_us"]
    return row


@scenario("latency", "Single-session step latency")
def run(ctx: Context) -> Section:
    """One session stepping one game; per obs type, sync and async clients, vs in-process ALE."""
    opts = ctx.options
    section = Section("latency", "Single-session step latency", LATENCY_COLUMNS)
    placements = ctx.placements()
    works = list(ctx.workloads())
    phases = sum(1 + len(clients_for(p, opts.clients)) for p in placements)
    ctx.progress.start(section.title, phases * len(works))
    for placement in placements:
        _one_placement(ctx, section, placement, works)
    section.notes.append(
        "vs in-process: steps/s over in-process ALE steps/s, same game, options, seed and "
        "actions, measured in the same run (1.00 = no cost at all); overhead: mean µs per "
        "step added by the transport."
    )
    if "sync-poll" in opts.clients:
        section.notes.append(
            f"sync-poll (split cores only): client (busy_poll={BUSY_POLL}) and server "
            f"(--busy-poll {BUSY_POLL}) poll for {BUSY_POLL * 1e3:g} ms after each message "
            "instead of sleeping, so neither core is woken from idle; each keeps its core busy."
        )
    return section


def _one_placement(
    ctx: Context, section: Section, placement: Placement, works: list[Workload]
) -> None:
    opts = ctx.options
    clients = clients_for(placement, opts.clients)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(our_server(placement))
        urls = {c: server.url for c in clients}
        servers = [server]
        for client in clients:
            if client in SERVER_ARGS:
                own = stack.enter_context(our_server(placement, SERVER_ARGS[client]))
                urls[client] = own.url
                servers.append(own)
        stack.enter_context(placement.client_side())
        for work in works:
            base = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
            ctx.progress.phase(f"in-process {work.label()} [{placement.name}]")
            for each in servers:
                settle(each)
            ref_samples = best_of(opts.rounds, partial(inprocess_steps, work))
            reference = latency_row(ref_samples)
            section.add(**base, path="in-process", **reference, vs_inprocess=1.0, overhead_us=0.0)
            section.sample(work.obs_type, f"in-process [{placement.name}]", ref_samples)
            for client in clients:
                ctx.progress.phase(f"{client} client {work.label()} [{placement.name}]")
                samples = best_of(opts.rounds, partial(remote_steps, client, urls[client], work))
                section.add(**base, path=f"openenv-ws {client}", **compare_row(samples, reference))
                section.sample(work.obs_type, f"openenv-ws {client} [{placement.name}]", samples)
