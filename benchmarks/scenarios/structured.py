"""Structured environments: CartPole (Gymnasium by id) and an OpenEnv-style text
environment, remote step latency against in-process and against openenv-core's own
server hosting the same environment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from openenv_ws.client import EnvClient

from ..measure import (
    Placement,
    latency_row,
    run_async,
    time_steps,
    time_steps_async,
    warm_up,
    warm_up_async,
)
from ..servers import PeerServer, PeerUnavailable, our_server
from ..suite import Column, Context, Section, scenario
from .floor import bare

__all__ = ["run"]

PEER_MODULE = "benchmarks.peers.openenv_envs"
APP = "benchmarks.peers.openenv_envs:EchoEnvironment"
#: The targets: p50 added over in-process (µs, at most) and speed-up over openenv-core.
ADDED_TARGET, SPEEDUP_TARGET = 30.0, 20.0
#: The floor's exchange (benchmarks/scenarios/floor.py).
FLOOR = "30 bytes out, 60 back, no framing, no decoding"
#: Messages of the text environment's episode, cycled.
MESSAGES = ("hello", "a longer message of some forty characters", "", "ok", "ünïcode ✓")

COLUMNS = [
    Column("env", "env"),
    Column("placement", "placement"),
    Column("path", "path"),
    Column("steps", "steps"),
    Column("p50_us", "p50 µs", ",.1f"),
    Column("p90_us", "p90 µs", ",.1f"),
    Column("p99_us", "p99 µs", ",.1f"),
    Column("max_us", "max µs", ",.0f"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("added_us", "p50 added over in-process µs", ",.1f"),
    Column("openenv_x", "p50 speed-up over openenv-core", ",.1f"),
]

Samples = np.ndarray[Any, Any]


def _requires() -> str | None:
    try:
        import gymnasium  # noqa: F401
        import openenv.core  # noqa: F401
    except ImportError as exc:
        return f"needs gymnasium and openenv-core: pip install -e '.[bench,gym]' ({exc})"
    return None


def _cartpole_actions(steps: int, seed: int) -> tuple[int, ...]:
    return tuple(int(a) for a in np.random.default_rng(seed).integers(0, 2, size=steps))


def _inprocess_cartpole(actions: tuple[int, ...], seed: int) -> Samples:
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    try:
        env.reset(seed=seed)

        def step(a: int) -> bool:
            _, _, terminated, truncated, _ = env.step(a)
            return bool(terminated or truncated)

        warm_up(step, lambda: env.reset(seed=seed), actions[:200])
        env.reset(seed=seed)
        return time_steps(step, lambda: env.reset(seed=seed), actions)
    finally:
        env.close()


def _inprocess_echo(actions: tuple[int, ...]) -> Samples:
    from ..peers.openenv_envs import EchoAction, EchoEnvironment

    env = EchoEnvironment()
    env.reset()

    def step(i: int) -> bool:
        return bool(env.step(EchoAction(message=MESSAGES[i % len(MESSAGES)])).done)

    warm_up(step, env.reset, actions[:200])
    return time_steps(step, env.reset, actions)


def _ours(url: str, config: dict[str, Any], act: Callable[[int], Any], n: int) -> Samples:
    env: EnvClient[Any]
    with EnvClient(url, config=config) as env:
        env.reset(seed=0)
        actions = tuple(range(n))
        warm_up(lambda i: env.step(act(i)).done, lambda: env.reset(seed=0), actions[:200])
        env.reset(seed=0)
        return time_steps(lambda i: env.step(act(i)).done, lambda: env.reset(seed=0), actions)


def _openenv_client(url: str, act: Callable[[int], Any], n: int) -> Samples:
    """openenv-core's own WebSocket client (GenericEnvClient) stepping `n` times."""
    from openenv.core.generic_client import GenericEnvClient

    async def play() -> Samples:
        async with GenericEnvClient(base_url=url) as env:

            async def step(i: int) -> bool:
                return bool((await env.step(act(i))).done)

            async def reset() -> object:
                return await env.reset(seed=0)

            await reset()
            actions = tuple(range(n))
            await warm_up_async(step, reset, actions[:50])
            await reset()
            return await time_steps_async(step, reset, actions)

    return run_async(play())


def _text(i: int) -> dict[str, str]:
    return {"message": MESSAGES[i % len(MESSAGES)]}


@scenario(
    "structured",
    "Structured environments: CartPole and an OpenEnv text environment",
    requires=_requires,
    default=False,
)
def run(ctx: Context) -> Section:
    """Remote step p50 against in-process and against openenv-core's own server."""
    title = "Structured environments: CartPole and an OpenEnv text environment"
    section = Section("structured", title, COLUMNS)
    steps = ctx.options.steps
    peer_steps = ctx.options.peer_steps
    placements = ctx.placements()
    ctx.progress.start(title, 11 * len(placements))
    cart = _cartpole_actions(steps, ctx.options.seed)
    for placement in placements:
        _cartpole(ctx, section, placement, cart, peer_steps)
        _echo(ctx, section, placement, steps, peer_steps)
    section.notes.append(
        "CartPole: gymnasium.make('CartPole-v1') in-process; openenv-ws serve --env gymnasium "
        "with the sync EnvClient (config {'id': 'CartPole-v1'}); openenv-core 0.3's create_app "
        "under uvicorn hosting CartPole-v1 behind OpenEnv models "
        "(benchmarks/peers/openenv_envs.py) with its GenericEnvClient over /ws."
    )
    section.notes.append(
        "text: openenv-core's echo example (benchmarks/peers/openenv_envs.py): in-process "
        "env.step(EchoAction(...)); openenv-ws serve --env openenv --openenv-app "
        f"{APP} (calls on the session's worker thread, and with --openenv-inline on the "
        "event loop) with the sync EnvClient; openenv-core's own server and client as above."
    )
    section.notes.append(
        f"floor: a bare TCP request/reply between two processes in the same placement ({FLOOR}, "
        "benchmarks/scenarios/floor.py), measured next to each environment, plus its "
        "in-process step: the p50 no remote server could beat, and the speed-up over "
        "openenv-core that it would give."
    )
    return section


def _verdict(env: str, placement: str, best: dict[str, Any], floor: dict[str, Any]) -> str:
    """One line: our best sync row against both targets, and what the floor allows."""
    speedup, bound = best.get("openenv_x"), floor.get("openenv_x")
    return (
        f"{env}, {placement}: {best['path']} adds {best['added_us']:.1f} µs "
        f"(target {ADDED_TARGET:g} µs or less), "
        + ("n/a" if speedup is None else f"{speedup:.1f}x")
        + f" openenv-core (target {SPEEDUP_TARGET:g}x); a bare TCP round trip alone adds "
        f"{floor['added_us']:.1f} µs and would be " + ("n/a" if bound is None else f"{bound:.1f}x")
    )


def _rows(
    section: Section,
    base: dict[str, Any],
    reference: dict[str, float],
    peer: dict[str, float] | None,
    rows: list[tuple[str, dict[str, float] | None, int, str]],
    floor: tuple[str, dict[str, float], int, str],
) -> None:
    """The rows of one environment, its floor last, and the line of its verdict."""
    made = []
    for path, stats, n, note in [*rows, floor]:
        row: dict[str, Any] = {**base, "path": path + (f" ({note})" if note else ""), "steps": n}
        if stats is not None:
            row.update(stats)
            row["added_us"] = stats["p50_us"] - reference["p50_us"]
            if peer is not None:
                row["openenv_x"] = peer["p50_us"] / stats["p50_us"]
        made.append(section.add(**row))
    ours = [r for r in made if r["path"].startswith("openenv-ws sync") and "added_us" in r]
    if ours:
        best = min(ours, key=lambda r: r["added_us"])
        section.notes.append(_verdict(base["env"], base["placement"], best, made[-1]))


def _floor(
    ctx: Context, placement: Placement, reference: dict[str, float], steps: int
) -> tuple[str, dict[str, float], int, str]:
    """The row of a bare TCP round trip plus the in-process step (no polling)."""
    ctx.progress.phase(f"bare TCP floor ({placement.name})")
    p50, mean = bare(placement, False, steps)
    floor = {"p50_us": p50 + reference["p50_us"], "mean_us": mean + reference["mean_us"]}
    return "floor: bare TCP round trip + in-process step", floor, steps, ""


def _peer(placement: Placement, env: str, act: Callable[[int], Any], n: int) -> tuple[Any, str]:
    try:
        with PeerServer(PEER_MODULE, env={"PEER_ENV": env}, placement=placement) as peer:
            return latency_row(_openenv_client(peer.http_url, act, n)), ""
    except (PeerUnavailable, OSError, RuntimeError) as exc:
        return None, f"could not run: {exc}"


def _cartpole(
    ctx: Context, section: Section, placement: Placement, actions: tuple[int, ...], n: int
) -> None:
    base = {"env": "CartPole-v1", "placement": placement.name}
    with placement.client_side():
        ctx.progress.phase(f"CartPole in-process ({placement.name})")
        with placement.server_side():
            reference = latency_row(_inprocess_cartpole(actions, ctx.options.seed))
        ctx.progress.phase(f"CartPole openenv-ws ({placement.name})")
        with our_server(placement, ["--env", "gymnasium"]) as server:
            ours = latency_row(
                _ours(server.url, {"id": "CartPole-v1"}, lambda i: actions[i], len(actions))
            )
        ctx.progress.phase(f"CartPole openenv-core ({placement.name})")
        peer, why = _peer(placement, "cartpole", lambda i: {"action": actions[i]}, n)
        floor = _floor(ctx, placement, reference, len(actions))
    _rows(
        section,
        base,
        reference,
        peer,
        [
            ("in-process", reference, len(actions), ""),
            ("openenv-ws sync", ours, len(actions), ""),
            ("openenv-core WS", peer, n if peer else 0, why),
        ],
        floor,
    )


def _echo(ctx: Context, section: Section, placement: Placement, steps: int, n: int) -> None:
    base = {"env": "OpenEnv text (echo)", "placement": placement.name}
    serve = ["--env", "openenv", "--openenv-app", APP]
    with placement.client_side():
        ctx.progress.phase(f"text in-process ({placement.name})")
        with placement.server_side():
            reference = latency_row(_inprocess_echo(tuple(range(steps))))
        ctx.progress.phase(f"text openenv-ws ({placement.name})")
        with our_server(placement, serve) as server:
            ours = latency_row(_ours(server.url, {}, _text, steps))
        ctx.progress.phase(f"text openenv-ws inline ({placement.name})")
        with our_server(placement, [*serve, "--openenv-inline"]) as server:
            inline = latency_row(_ours(server.url, {}, _text, steps))
        ctx.progress.phase(f"text OpenEnv client on openenv-ws ({placement.name})")
        with our_server(placement, [*serve, "--openenv-inline"]) as server:
            dialect = latency_row(_openenv_client(server.http_url, _text, n))
        ctx.progress.phase(f"text openenv-core ({placement.name})")
        peer, why = _peer(placement, "echo", _text, n)
        floor = _floor(ctx, placement, reference, steps)
    _rows(
        section,
        base,
        reference,
        peer,
        [
            ("in-process", reference, steps, ""),
            ("openenv-ws sync", ours, steps, ""),
            ("openenv-ws sync, --openenv-inline", inline, steps, ""),
            ("OpenEnv WS client → openenv-ws inline", dialect, n, ""),
            ("openenv-core WS", peer, n if peer else 0, why),
        ],
        floor,
    )
