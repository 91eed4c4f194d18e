"""Peer comparison: the same workload through OpenEnv's Atari server and clients."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from openenv_ws.providers import LocalServerProvider

from ..measure import (
    Placement,
    Workload,
    inprocess_steps,
    latency_row,
    run_async,
    time_steps,
    time_steps_async,
)
from ..servers import PeerServer, PeerUnavailable, our_server, serve_supports, settle
from ..suite import Column, Context, Section, scenario
from .latency import (
    CLIENTS,
    KEY_COLUMNS,
    PERCENTILE_COLUMNS,
    SERVER_ARGS,
    Window,
    no_window,
    polling_pays,
    sync_steps,
)

__all__ = ["peer_env", "peer_ws_steps"]

PEER_MODULE = "benchmarks.peers.openenv_atari"

COLUMNS = [
    *KEY_COLUMNS,
    Column("steps", "steps"),
    *PERCENTILE_COLUMNS,
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("ours_x", "openenv-ws speed-up", ",.1f"),
    Column("poll_x", "speed-up, busy poll", ",.1f"),
    Column("vs_inprocess", "vs in-process", ".3f"),
    Column("note", "note"),
]


def _peer_version() -> str | None:
    try:
        return importlib.metadata.version("openenv-core")
    except importlib.metadata.PackageNotFoundError:
        return None


def peer_ws_steps(url: str, work: Workload, window: Window = no_window) -> np.ndarray[Any, Any]:
    """OpenEnv's own asyncio WebSocket ``EnvClient`` (its native client) playing `work`;
    ``window(client)`` is held around the timed steps."""
    from ..peers.openenv_atari import AtariAction, OpenEnvAtariClient

    async def play() -> np.ndarray[Any, Any]:
        async with OpenEnvAtariClient(base_url=url) as env:

            async def step(a: int) -> bool:
                return bool((await env.step(AtariAction(action_id=a))).done)

            async def reset() -> object:
                return await env.reset(seed=work.seed)

            await reset()
            await time_steps_async(step, reset, work.warmup[:10])
            await reset()
            with window(env):
                return await time_steps_async(step, reset, work.actions)

    return run_async(play())


def _http_steps(url: str, work: Workload, steps: int) -> np.ndarray[Any, Any]:
    """``POST /step`` with a keep-alive ``requests`` session, parsed as OpenEnv's client does."""
    import requests

    from ..peers.openenv_atari import parse_result

    with requests.Session() as session:

        def step(a: int) -> bool:
            reply = session.post(f"{url}/step", json={"action": {"action_id": a}}, timeout=60)
            reply.raise_for_status()
            return bool(parse_result(reply.json()).done)

        step(work.actions[0])
        # Each call is a whole episode on the server side (a new environment per request),
        # so there is nothing to reset between calls.
        return time_steps(step, lambda: None, work.actions[:steps])


def peer_env(work: Workload, *, screen_image: bool) -> dict[str, str]:
    return {
        "ATARI_GAME": work.game,
        "ATARI_OBS_TYPE": work.obs_type,
        # Our sessions use ALE/<Game>-v5's defaults; give the peer the same options.
        "ATARI_REPEAT_ACTION_PROB": "0.25",
        "ATARI_FRAMESKIP": "4",
        "ATARI_SCREEN_IMAGE": "1" if screen_image else "0",
    }


@scenario("openenv", "Peer: OpenEnv's Atari server and clients")
def run(ctx: Context) -> Section:
    """The same workload through OpenEnv (openenv-core) over its WebSocket and HTTP /step."""
    opts = ctx.options
    section = Section("openenv", "Peer: OpenEnv's Atari server and clients", COLUMNS)
    placements = ctx.placements()
    works = [
        ctx.workload(game, obs, opts.peer_steps) for game in opts.games for obs in opts.obs_types
    ]
    # Phases per workload and placement: in-process, ours, OpenEnv client on ours, OpenEnv WS,
    # HTTP, OpenEnv WS without PNG on RGB, and ours busy-polling on split cores.
    phases = sum(
        (6 if w.obs_type == "rgb" else 5) + polling_pays(p) for w in works for p in placements
    )
    ctx.progress.start(section.title, phases)
    version = _peer_version()
    for placement in placements:
        with our_server(placement) as server, placement.client_side():
            for work in works:
                # The plot gets one latency line per path: the first placement's.
                keep = placement is placements[0]
                _one_workload(ctx, section, placement, work, server, version, keep)
    section.notes.append(
        f"OpenEnv: openenv-core {version or '(not installed)'} server (`create_app`, uvicorn "
        "defaults) and clients; its Atari environment is not published on PyPI, so "
        "benchmarks/peers/openenv_atari.py rebuilds it on openenv-core's interfaces with the "
        "same messages (flat JSON screen, PNG `screen_image` on RGB)."
    )
    section.notes.append(
        "openenv-ws speed-up: openenv-ws sync client steps/s over the row's steps/s, both "
        "measured in this run with the same server placement."
    )
    section.notes.append(
        "speed-up, busy poll (split cores only): the same for openenv-ws sync-poll, the sync "
        "client and a server that both busy-poll (client busy_poll, server --busy-poll) "
        "instead of sleeping between messages, each on its own core."
    )
    section.notes.append(
        "OpenEnv's HTTP `/step` builds a new environment (ROM load) for every call and ignores "
        "the episode; its Atari `reset` ignores the seed. Same game, options and actions."
    )
    return section


def _one_workload(
    ctx: Context,
    section: Section,
    placement: Placement,
    work: Workload,
    server: LocalServerProvider,
    version: str | None,
    keep_samples: bool,
) -> None:
    base = {"game": work.game, "obs": work.obs_type, "placement": placement.name}
    ctx.progress.phase(f"in-process {work.label()}")
    settle(server)
    reference = latency_row(inprocess_steps(work))
    ctx.progress.phase(f"openenv-ws sync {work.label()}")
    ours = latency_row(sync_steps(server.url, work))
    polled = None
    if polling_pays(placement):
        ctx.progress.phase(f"openenv-ws sync-poll {work.label()}")
        with our_server(placement, SERVER_ARGS["sync-poll"]) as polling:
            settle(polling)
            polled = latency_row(CLIENTS["sync-poll"](polling.url, work))

    def add(path: str, stats: dict[str, float] | None, steps: int, note: str = "") -> None:
        row = {**base, "path": path, "steps": steps, "note": note}
        if stats is not None:
            row.update(stats)
            if stats is not reference:
                row["ours_x"] = ours["steps_per_s"] / stats["steps_per_s"]
                if polled is not None:
                    row["poll_x"] = polled["steps_per_s"] / stats["steps_per_s"]
            row["vs_inprocess"] = stats["steps_per_s"] / reference["steps_per_s"]
        section.add(**row)

    def plot(label: str, samples: Any) -> None:
        if keep_samples:
            section.sample(work.obs_type, label, samples)

    add("in-process", reference, len(work.actions))
    add("openenv-ws sync", ours, len(work.actions))
    if polled is not None:
        add("openenv-ws sync-poll", polled, len(work.actions))
    ctx.progress.phase(f"OpenEnv client on openenv-ws {work.label()}")
    if serve_supports("--openenv-config"):
        # OpenEnv's unchanged client against our server (its JSON dialect on the same /ws).
        config = ["--openenv-config", json.dumps(work.config)]
        with our_server(placement, config) as dialect:
            samples = peer_ws_steps(dialect.http_url, work)
        add("OpenEnv WS client → openenv-ws", latency_row(samples), len(samples))
        plot("OpenEnv WS client → openenv-ws", samples)
    else:
        add("OpenEnv WS client → openenv-ws", None, 0, "pending: no OpenEnv dialect here")
    variants: list[tuple[str, bool]] = [("OpenEnv WS", True)]
    if work.obs_type == "rgb":
        variants.append(("OpenEnv WS, no PNG", False))
    for path, screen_image in variants:
        ctx.progress.phase(f"{path} {work.label()}")
        measure_http = screen_image  # HTTP once per workload, as OpenEnv ships it
        _peer_rows(ctx, add, plot, placement, work, path, screen_image, measure_http, version)


def _peer_rows(
    ctx: Context,
    add: Callable[..., None],
    plot: Callable[[str, Any], None],
    placement: Placement,
    work: Workload,
    path: str,
    screen_image: bool,
    measure_http: bool,
    version: str | None,
) -> None:
    http_steps = min(ctx.options.peer_http_steps, len(work.actions))
    if version is None:
        why = "openenv-core is not installed: pip install -e '.[bench]'"
        add(path, None, 0, why)
        if measure_http:
            add("OpenEnv HTTP /step", None, 0, why)
        return
    try:
        with PeerServer(
            PEER_MODULE, env=peer_env(work, screen_image=screen_image), placement=placement
        ) as peer:
            samples = peer_ws_steps(peer.http_url, work)
            add(path, latency_row(samples), len(samples))
            plot(path, samples)
            if measure_http:
                ctx.progress.phase(f"OpenEnv HTTP /step {work.label()}")
                samples = _http_steps(peer.http_url, work, http_steps)
                add("OpenEnv HTTP /step", latency_row(samples), len(samples), "new env per call")
                plot("OpenEnv HTTP /step", samples)
    except (PeerUnavailable, OSError, RuntimeError, ImportError) as exc:
        add(path, None, 0, f"could not run: {exc}")
