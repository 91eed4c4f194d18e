"""Remote host: the server in its own network namespace behind a rate-limited veth pair."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from openenv_ws.client import EnvClient

from .. import netns
from ..measure import Placement, Workload, inprocess_steps, latency_row
from ..servers import (
    PeerServer,
    PeerUnavailable,
    client_keywords,
    serve_supports,
    supports_pool,
    tls_files,
)
from ..suite import Column, Context, Section, scenario
from .latency import BUSY_POLL, polling_pays, sync_steps
from .peer_openenv import PEER_MODULE, peer_env, peer_ws_steps

__all__ = ["LINKS", "Meter"]

#: (label, rate in bits/s, tbf bucket in bytes). A bucket must hold what the sender hands
#: the qdisc between two runs of its timer; bulk TCP through this pair reached 930-970
#: Mbit/s with 16-32 KB at 1 Gbit/s (780 with 4 KB) and 92-99 Mbit/s with 2-8 KB at
#: 100 Mbit/s. A full bucket lets that many bytes through at the veth's own speed after an
#: idle spell, so it is kept near a quarter of a millisecond of the rate.
LINKS: tuple[tuple[str, int, int], ...] = (
    ("1 Gbit/s", 1_000_000_000, 32 * 1024),
    ("100 Mbit/s", 100_000_000, 4 * 1024),
)
GAMES = ("pong", "breakout")
#: Seconds of bulk TCP per link to check the rate the qdiscs let through.
BULK_SECONDS = 1.0

COLUMNS = [
    Column("game", "game"),
    Column("link", "link"),
    Column("path", "path"),
    Column("mode", "compression"),
    Column("steps", "steps"),
    Column("p50_us", "p50 µs", ",.0f"),
    Column("p99_us", "p99 µs", ",.0f"),
    Column("steps_per_s", "steps/s", ",.0f"),
    Column("vs_inprocess", "vs in-process", ".2f"),
    Column("vs_openenv", "vs OpenEnv", ",.1f"),
    Column("down_bytes", "bytes/step to client", ",.0f"),
    Column("up_bytes", "bytes/step to server", ",.0f"),
    Column("note", "note"),
]


@dataclass(frozen=True)
class _Atari(Workload):
    """A workload with the Atari options spelled out (ALE/<Game>-v5's)."""

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, "frameskip": 4, "repeat_action_probability": 0.25}


class Meter:
    """A step loop's `window`: the bytes the link moved while the timed steps ran, and the
    compression mode the client's session got."""

    def __init__(self, link: netns.Link) -> None:
        self.link = link
        self.mode: str | None = None
        self.down = 0
        self.up = 0

    def __call__(self, client: Any) -> contextlib.AbstractContextManager[object]:
        self.mode = _mode(client)
        return self._counting()

    @contextlib.contextmanager
    def _counting(self) -> Iterator[None]:
        rx, tx = self.link.counters()
        try:
            yield
        finally:
            rx2, tx2 = self.link.counters()
            self.down, self.up = rx2 - rx, tx2 - tx


def _mode(client: Any) -> str:
    """The compression a client's connection got: ours (``client.compression``), or the
    WebSocket extensions an OpenEnv client negotiated."""
    ws = getattr(client, "_ws", None)
    if ws is not None and hasattr(ws, "protocol"):
        names = [getattr(e, "name", str(e)) for e in ws.protocol.extensions]
        return ", ".join(names) or "none"
    return getattr(client, "compression", None) or "none"


#: (path, EnvClient options, server: "plain", "tls" or "poll", what it waits for or None).
Contender = tuple[str, dict[str, Any], str, str | None]


def _contenders(placement: Placement) -> list[Contender]:
    params = client_keywords(EnvClient)
    compress = "compression" in params and "delta" in params
    no_compress = None if compress else "EnvClient has no compression/delta arguments yet"
    tls = None
    if not serve_supports("--certfile") or "ca_file" not in params:
        tls = "no `serve --certfile/--keyfile` or client `ca_file` in this build yet"
    raw: dict[str, Any] = {"compression": None} if compress else {}
    rows: list[Contender] = [
        ("openenv-ws raw", raw, "plain", None),
        ("openenv-ws default", {}, "plain", no_compress),
    ]
    for codec in ("lz4", "zstd"):
        for delta in (False, True):
            path = f"openenv-ws {codec}{', delta' if delta else ''}"
            rows.append((path, {"compression": codec, "delta": delta}, "plain", no_compress))
    rows.append(("openenv-ws TLS, default options", {}, "tls", tls))
    if polling_pays(placement):  # each side on a core of its own
        path = "openenv-ws default, both busy-polling"
        rows.append((path, {"busy_poll": BUSY_POLL}, "poll", no_compress))
    return rows


@contextlib.contextmanager
def _no_proxy(host: str) -> Iterator[None]:
    """Keep `host` off any HTTP proxy the environment names (websockets honours them)."""
    before = os.environ.get("NO_PROXY")
    os.environ["NO_PROXY"] = f"{before},{host}" if before else host
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NO_PROXY", None)
        else:
            os.environ["NO_PROXY"] = before


def _server(
    link: netns.Link, placement: Placement, args: list[str], ca_file: str | None = None
) -> PeerServer:
    pool = ["--pool-size", "0"] if supports_pool() else []  # no ROM load behind a timed loop
    return PeerServer(
        "openenv_ws",
        env={},
        placement=placement,
        args=["serve", "--host", link.ns_ip, "--port", "0", *pool, *args],
        prefix=link.command([]),
        host=link.ns_ip,
        ca_file=ca_file,
    )


SINK = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
while conn.recv(1 << 20):
    pass
"""


def bulk_mbit(link: netns.Link, seconds: float = BULK_SECONDS) -> float:
    """Mbit/s that bulk TCP into the namespace puts on the wire (the shaped rate's check)."""
    cmd = link.command([sys.executable, "-c", SINK, link.ns_ip])
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as sink:
        try:
            assert sink.stdout is not None
            port = int(sink.stdout.readline())
            chunk = bytes(1 << 16)
            with socket.create_connection((link.ns_ip, port), timeout=10) as conn:
                _, sent = link.counters()
                start = time.perf_counter()
                while time.perf_counter() - start < seconds:
                    conn.sendall(chunk)
                _, sent2 = link.counters()
                return (sent2 - sent) * 8 / (time.perf_counter() - start) / 1e6
        finally:
            sink.kill()


def _stats(samples: np.ndarray[Any, Any], meter: Meter | None, ref: float) -> dict[str, Any]:
    stats = latency_row(samples)
    row: dict[str, Any] = {
        "steps": len(samples),
        "p50_us": stats["p50_us"],
        "p99_us": stats["p99_us"],
        "steps_per_s": stats["steps_per_s"],
        "vs_inprocess": stats["steps_per_s"] / ref,
    }
    if meter is not None:
        row |= {"mode": meter.mode, "down_bytes": meter.down / len(samples)}
        row["up_bytes"] = meter.up / len(samples)
    return row


@scenario("remote", "Remote host: server behind a rate-limited veth link", default=False)
def run(ctx: Context) -> Section:
    """Server in a network namespace behind a veth pair shaped by tbf (1 Gbit/s, 100 Mbit/s)."""
    section = Section("remote", "Remote host: server behind a rate-limited veth link", COLUMNS)
    why = netns.unavailable()
    if why is not None:
        section.status, section.reason = "skipped", why
        return section
    stale = netns.clean_stale()
    placement = ctx.placements()[0]
    contenders = _contenders(placement)
    per_link = max(1, ctx.options.rounds) * (len(contenders) + 1) + 1
    ctx.progress.start(section.title, len(GAMES) * len(LINKS) * per_link)
    rates: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        link = stack.enter_context(netns.namespace_link())
        stack.enter_context(_no_proxy(link.ns_ip))
        servers = _start_servers(stack, link, placement, contenders)
        stack.enter_context(placement.client_side())
        for game in GAMES:
            work = _Atari.make(game, "rgb", ctx.options.seed, ctx.options.steps)
            peer_work = _Atari.make(game, "rgb", ctx.options.seed, ctx.options.peer_steps)
            with _peer(link, placement, peer_work) as peer:
                for label, rate, burst in LINKS:
                    netns.shape(link, rate, burst)
                    if label not in rates:
                        rates[label] = bulk_mbit(link)
                    block = _one_link(ctx, link, label, work, peer_work, servers, peer, contenders)
                    section.rows += block
    section.notes += _notes(link, placement, rates, stale)
    return section


def _start_servers(
    stack: contextlib.ExitStack,
    link: netns.Link,
    placement: Placement,
    contenders: list[Contender],
) -> dict[str, str]:
    """Our servers in the namespace: kind ("plain", "tls") -> URL."""
    urls = {}
    plain = stack.enter_context(_server(link, placement, []))
    urls["plain"] = f"ws://{link.ns_ip}:{plain.port}/ws"
    if any(kind == "tls" and wait is None for _, _, kind, wait in contenders):
        files = stack.enter_context(tls_files(link.ns_ip))
        if files is not None:
            chain, key, ca = files
            args = ["--certfile", chain, "--keyfile", key]
            tls = stack.enter_context(_server(link, placement, args, ca_file=ca))
            urls["tls"] = f"wss://{link.ns_ip}:{tls.port}/ws"
            urls["ca_file"] = ca
    if any(kind == "poll" and wait is None for _, _, kind, wait in contenders):
        poll = stack.enter_context(_server(link, placement, ["--busy-poll", str(BUSY_POLL)]))
        urls["poll"] = f"ws://{link.ns_ip}:{poll.port}/ws"
    return urls


@contextlib.contextmanager
def _peer(link: netns.Link, placement: Placement, work: Workload) -> Iterator[PeerServer | str]:
    """OpenEnv's Atari server in the namespace, or why it could not start."""
    env = {**peer_env(work, screen_image=True), "PEER_HOST": link.ns_ip}
    prefix = link.command([])
    server = PeerServer(PEER_MODULE, env=env, placement=placement, prefix=prefix, host=link.ns_ip)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(server)
        except (PeerUnavailable, OSError) as exc:
            yield f"could not run: {exc}"
            return
        yield server


def _ours(url: str, work: Workload, options: dict[str, Any], meter: Meter) -> Any:
    return sync_steps(url, work, window=meter, **options)


def _one_link(
    ctx: Context,
    link: netns.Link,
    label: str,
    work: Workload,
    peer_work: Workload,
    servers: dict[str, str],
    peer: PeerServer | str,
    contenders: list[Contender],
) -> list[dict[str, Any]]:
    """The rows of one game on one link; rounds go over every contender in turn, so that
    the machine's drift reaches them alike, and each keeps its fastest round (other load
    only ever adds time)."""
    base = {"game": work.game, "link": label}
    plays: dict[str, Callable[[Meter], np.ndarray[Any, Any]]] = {
        "in-process": lambda meter: inprocess_steps(work)
    }
    rows = {"in-process": {**base, "path": "in-process"}}
    for path, options, kind, wait in contenders:
        rows[path] = {**base, "path": path}
        url = servers.get(kind)
        if wait is not None or url is None:
            rows[path]["note"] = f"pending: {wait or 'trustme is not installed'}"
            continue
        if kind == "tls":
            options = {**options, "ca_file": servers["ca_file"]}
        plays[path] = functools.partial(_ours, url, work, options)
    rounds = max(1, ctx.options.rounds)
    best: dict[str, tuple[np.ndarray[Any, Any], Meter]] = {}
    for i in range(rounds):
        for path, play in plays.items():
            ctx.progress.phase(f"{path} {work.game} [{label}] {i + 1}/{rounds}")
            meter = Meter(link)
            samples = play(meter)
            if path not in best or samples.sum() < best[path][0].sum():
                best[path] = samples, meter
    ref = latency_row(best["in-process"][0])["steps_per_s"]
    for path, (samples, meter) in best.items():
        rows[path] |= _stats(samples, None if path == "in-process" else meter, ref)
    ctx.progress.phase(f"OpenEnv WS {work.game} [{label}]")
    path = "OpenEnv WS (its server and client)"
    if isinstance(peer, str):
        return [*rows.values(), {**base, "path": path, "note": peer}]
    meter = Meter(link)
    samples = peer_ws_steps(peer.http_url, peer_work, meter)
    openenv = {**base, "path": path, **_stats(samples, meter, ref)}
    for path, row in rows.items():
        if path != "in-process" and "steps_per_s" in row:
            row["vs_openenv"] = row["steps_per_s"] / openenv["steps_per_s"]
    return [*rows.values(), openenv]


def _notes(
    link: netns.Link, placement: Placement, rates: dict[str, float], stale: list[str]
) -> list[str]:
    shaped = "; ".join(
        f"{label}: tbf rate {rate // 1_000_000} Mbit/s, burst {burst // 1024} KB, latency 50 ms "
        f"(bulk TCP measured {rates.get(label, 0.0):,.0f} Mbit/s on the wire)"
        for label, rate, burst in LINKS
    )
    notes = [
        f"Server (and OpenEnv's) in network namespace {link.namespace} at {link.ns_ip}, the "
        f"client here at {link.host_ip}, joined by a veth pair shaped on both ends: {shaped}. "
        f"Placement {placement.describe()}.",
        "Games RGB, frameskip 4, repeat_action_probability 0.25, random actions (the same "
        "seed and sequence for every row); in-process is AtariEnvironment in the client's "
        "process. Each row keeps its fastest round of --rounds (most steps/s); a round goes "
        "over in-process and every openenv-ws row in turn. The client is EnvClient with its "
        "defaults (colour codes; no shared memory, the server not being on a loopback "
        "address) plus the row's options; raw: compression=None. Both busy-polling (split "
        f"placement only): the client with busy_poll={BUSY_POLL} against a server started "
        f"with --busy-poll {BUSY_POLL}: each polls its socket for {BUSY_POLL * 1e3:g} ms "
        "after a message instead of sleeping, keeping its core busy.",
        "bytes/step: the veth counters of the client's end (Ethernet frames, both directions, "
        "TCP acknowledgements included) around the timed steps only, over the steps.",
        "OpenEnv WS: benchmarks/peers/openenv_atari.py on openenv-core's server and its own "
        "websockets client with its defaults, which negotiate permessage-deflate (the "
        "compression column says what was negotiated), PNG screen_image on; its step count "
        "is --peer-steps. vs OpenEnv: the row's steps/s over OpenEnv's on the same link.",
    ]
    if stale:
        notes.append(f"Removed what earlier runs left behind: {', '.join(stale)}.")
    return notes
