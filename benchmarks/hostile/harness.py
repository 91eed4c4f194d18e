"""The hostile run: one server, a neighbour session stepping, and attack phases one by one."""

from __future__ import annotations

import collections
import contextlib
import http.client
import multiprocessing
import os
import queue
import threading
import time
from array import array
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

import numpy as np
import psutil

from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider

from ..measure import Placement, n_actions, pin_process
from .attacks import attack_process
from .rawwire import MB, OP_PING, OP_PONG, Target, error_name, handshake

__all__ = ["Bench", "Phase", "PhaseResult", "Settings", "phases"]


@dataclass
class Settings:
    """What the hostile run does (the scenario derives it from the suite's options)."""

    seconds: float = 30.0
    flood_seconds: float = 60.0
    flood_conns: int = 10
    burst_mib: float = 4.0
    slowloris: int = 5000
    trickle_rate: float = 1.0
    phases: str = "pong,ping,opens,vector,heavy,slowloris,flood,after"
    attacker_address: str = "127.0.0.2"
    rss_cap_mb: float = 4096.0
    serve_args: tuple[str, ...] = ()
    step_timeout: float = 30.0
    settle_timeout: float = 30.0
    server_nofile: int | None = None
    pin: bool = True


def neighbour_process(
    url: str,
    timeout: float,
    stop: Event,
    ready: Event,
    inflight: Synchronized,  # type: ignore[type-arg]
    last_done: Synchronized,  # type: ignore[type-arg]
    results: multiprocessing.Queue[tuple[bytes, bytes, list[tuple[float, str]]]],
    cores: set[int] | None,
) -> None:
    """Step Pong back to back until `stop`; every step's (start, seconds); reconnect on errors."""
    if cores:
        os.sched_setaffinity(0, cores)
    starts, seconds = array("d"), array("d")
    errors: list[tuple[float, str]] = []
    rng = np.random.default_rng(0)
    clock = time.monotonic
    while not stop.is_set():
        try:
            env: EnvClient[Any] = EnvClient(
                url, config={"game": "pong"}, timeout=timeout, open_timeout=timeout, resume=False
            )
            with env:
                env.reset(seed=0)
                actions = rng.integers(0, n_actions(env.spec.action), 4096).tolist()
                ready.set()
                i = 0
                while not stop.is_set():
                    t0 = clock()
                    inflight.value = t0
                    done = env.step(actions[i % 4096]).done
                    t1 = clock()
                    inflight.value = 0.0
                    last_done.value = t1
                    starts.append(t0)
                    seconds.append(t1 - t0)
                    i += 1
                    if done:
                        env.reset()
        except Exception as exc:  # noqa: BLE001 - counted per phase
            inflight.value = 0.0
            errors.append((clock(), f"{type(exc).__name__}: {exc}"[:200]))
            ready.set()
            stop.wait(0.5)
    results.put((starts.tobytes(), seconds.tobytes(), errors))


@dataclass
class Phase:
    key: str
    label: str
    seconds: float
    kind: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class PhaseResult:
    phase: Phase
    t0: float
    t1: float
    rss_before: float
    rss_peak: float
    attack: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)


class RssSampler:
    """The server's RSS (with its worker processes) every 0.1 s, on a thread."""

    def __init__(self, pid: int, cap: float) -> None:
        self.process = psutil.Process(pid)
        self.cap = cap
        self.samples: list[tuple[float, float]] = []
        self.over_cap = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> float:
        try:
            total = float(self.process.memory_info().rss)
            for child in self.process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        except psutil.Error:
            return float("nan")
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            value = self.rss()
            self.samples.append((time.monotonic(), value))
            if value > self.cap:
                self.over_cap.set()

    def peak(self, t0: float, t1: float) -> float:
        inside = [v for t, v in self.samples if t0 <= t <= t1]
        return max(inside, default=float("nan"))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def health_ms(host: str, port: int, timeout: float) -> tuple[str, float]:
    """(``200`` or what went wrong, milliseconds) for one ``GET /health``."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        reply = conn.getresponse()
        reply.read()
        what = str(reply.status)
    except (OSError, http.client.HTTPException) as exc:
        what = error_name(exc)
    finally:
        conn.close()
    return what, (time.perf_counter() - start) * 1e3


def probe(target: Target, attacker: str, until: float, stop: threading.Event) -> dict[str, Any]:
    """``/health`` every 0.25 s and a new handshake every 0.5 s (alternating source addresses)."""
    health: list[tuple[str, float]] = []
    clients: dict[str, collections.Counter[str]] = {
        "127.0.0.1": collections.Counter(),
        attacker: collections.Counter(),
    }

    def health_loop() -> None:
        while not stop.is_set() and time.monotonic() < until:
            health.append(health_ms(*target, timeout=2.0))
            stop.wait(0.25)

    def client_loop() -> None:
        sources = list(clients)
        i = 0
        while not stop.is_set() and time.monotonic() < until:
            source = sources[i % len(sources)]
            what, sock = handshake(target, source, 2.0)
            if sock is not None:
                sock.close()
            clients[source][what] += 1
            i += 1
            stop.wait(0.5)

    threads = [threading.Thread(target=f, daemon=True) for f in (health_loop, client_loop)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()) + 5)
    answered = [ms for what, ms in health if what == "200"]
    return {
        "health_probes": len(health),
        "health_answered": len(answered),
        "health_failures": dict(collections.Counter(w for w, _ in health if w != "200")),
        "health_ms_p50": float(np.percentile(answered, 50)) if answered else None,
        "health_ms_p99": float(np.percentile(answered, 99)) if answered else None,
        "health_ms_max": max(answered, default=None),
        "new_clients": {source: dict(c) for source, c in clients.items()},
    }


class Bench:
    """One server, one neighbour, the phases in order."""

    def __init__(self, args: Settings) -> None:
        self.args = args
        self.ctx = multiprocessing.get_context("spawn")
        split = Placement.named("split")
        pinned = args.pin and split.server is not None
        self.placement = split if pinned else Placement.named("any")
        self.server_cores = set(split.server or ()) if pinned else None
        self.client_cores = set(split.client or ()) if pinned else None
        self.serve_args = ["--env", "atari", *args.serve_args]
        self.server = LocalServerProvider(args=self.serve_args, stop_timeout=5.0)
        self.stop_neighbour = self.ctx.Event()
        self.ready = self.ctx.Event()
        self.inflight = self.ctx.Value("d", 0.0)
        self.last_done = self.ctx.Value("d", 0.0)
        self.neighbour_results: multiprocessing.Queue[Any] = self.ctx.Queue()
        self.neighbour: Any = None
        self.sampler: RssSampler | None = None

    @property
    def target(self) -> Target:
        assert self.server.port is not None
        return (self.server.host, self.server.port)

    def start(self) -> None:
        self.server.start()
        assert self.server.pid is not None
        if self.server_cores:
            pin_process(self.server.pid, self.server_cores)
        if self.args.server_nofile:
            server = psutil.Process(self.server.pid)
            for process in [server, *server.children(recursive=True)]:
                hard = process.rlimit(psutil.RLIMIT_NOFILE)[1]
                process.rlimit(psutil.RLIMIT_NOFILE, (min(self.args.server_nofile, hard), hard))
        self.sampler = RssSampler(self.server.pid, self.args.rss_cap_mb * MB)
        self.neighbour = self.ctx.Process(
            target=neighbour_process,
            args=(
                self.server.url,
                self.args.step_timeout,
                self.stop_neighbour,
                self.ready,
                self.inflight,
                self.last_done,
                self.neighbour_results,
                self.client_cores,
            ),
            daemon=True,
        )
        self.neighbour.start()
        if not self.ready.wait(60):
            raise RuntimeError("the neighbour session did not start within 60 s")

    def finish(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[tuple[float, str]]]:
        """Stop the neighbour and the server; the neighbour's (starts, seconds, errors)."""
        self.stop_neighbour.set()
        got: Any = None
        if self.neighbour is not None:
            with contextlib.suppress(queue.Empty):
                got = self.neighbour_results.get(timeout=self.args.step_timeout + 10)
        if self.neighbour is not None:
            self.neighbour.join(5)
            if self.neighbour.is_alive():
                self.neighbour.kill()
                self.neighbour.join(5)
        if self.sampler is not None:
            self.sampler.stop()
        self.server.stop()
        if got is None:
            return np.empty(0), np.empty(0), [(time.monotonic(), "the neighbour sent no results")]
        starts, seconds, errors = got
        return np.frombuffer(starts), np.frombuffer(seconds), errors

    def server_alive(self) -> bool:
        process = self.server.process
        return process is not None and process.poll() is None

    def settle(self, timeout: float) -> list[str]:
        """Wait until /health answers, the pool is full and the neighbour steps; what did not."""
        deadline = time.monotonic() + timeout
        missing = ["/health", "warm pool", "neighbour steps"]
        while time.monotonic() < deadline and missing and self.server_alive():
            missing = []
            body = self.server.health(timeout=2.0)
            if body is None:
                missing.append("/health")
            elif (pool := body.get("pool")) and pool["ready"] < pool["size"] * max(
                1, pool["configs"]
            ):
                missing.append("warm pool")
            if time.monotonic() - self.last_done.value > 0.5:
                missing.append("neighbour steps")
            if missing:
                time.sleep(0.1)
        return [f"not settled before it ({', '.join(missing)})"] if missing else []

    def run_phase(self, phase: Phase) -> PhaseResult:
        assert self.sampler is not None
        notes = self.settle(self.args.settle_timeout)
        rss_before = self.sampler.rss()
        self.sampler.over_cap.clear()
        stop = self.ctx.Event()
        results: multiprocessing.Queue[dict[str, Any]] = self.ctx.Queue()
        attacker = None
        probes: dict[str, Any] = {}
        prober: threading.Thread | None = None
        t0 = time.monotonic()
        until = t0 + phase.seconds
        if phase.kind is not None:
            attacker = self.ctx.Process(
                target=attack_process,
                args=(
                    phase.kind,
                    self.target,
                    self.args.attacker_address,
                    {"seconds": phase.seconds, **phase.kwargs},
                    stop,
                    results,
                    self.client_cores,
                ),
                daemon=True,
            )
            attacker.start()
        if phase.key == "slowloris":
            probe_stop = threading.Event()

            def run_probes() -> None:
                probes.update(probe(self.target, self.args.attacker_address, until, probe_stop))

            prober = threading.Thread(target=run_probes, daemon=True)
            prober.start()
        while time.monotonic() < until:
            if attacker is not None and not attacker.is_alive():
                break
            if self.sampler.over_cap.is_set():
                notes.append(
                    f"stopped at the RSS cap ({self.args.rss_cap_mb} MB) after "
                    f"{time.monotonic() - t0:.1f} s"
                )
                break
            if not self.server_alive():
                notes.append(f"the server died after {time.monotonic() - t0:.1f} s")
                break
            time.sleep(0.05)
        stop.set()
        t1 = time.monotonic()
        attack: dict[str, Any] = {}
        if attacker is not None:
            with contextlib.suppress(queue.Empty):
                attack = results.get(timeout=15)
            attacker.join(5)
            if attacker.is_alive():
                attacker.kill()
                attacker.join(5)
                notes.append("the attacker overstayed and was killed")
        if prober is not None:
            probe_stop.set()
            prober.join(10)
        rss_peak = self.sampler.peak(t0, time.monotonic())
        # A step that started in the window and stalls past it still counts for it.
        wait_until = time.monotonic() + self.args.settle_timeout
        while time.monotonic() < wait_until and self.server_alive():
            pending = self.inflight.value
            if self.last_done.value > t1 and (pending == 0.0 or pending >= t1):
                break
            time.sleep(0.02)
        else:
            pending = self.inflight.value
            if pending and pending < t1:
                notes.append(
                    f"a step started in the window was still waiting "
                    f"{time.monotonic() - pending:.1f} s later"
                )
        return PhaseResult(phase, t0, t1, rss_before, rss_peak, attack, notes, probes)


def phases(args: Settings) -> list[Phase]:
    every = {
        "baseline": Phase("baseline", "baseline (no attack)", args.seconds),
        "pong": Phase(
            "pong",
            f"pong flood, {args.burst_mib:g} MiB writes",
            args.seconds,
            "control_flood",
            {
                "opcode": OP_PONG,
                "payload": b"",
                "frames_per_write": int(args.burst_mib * MB) // 6,
                "conns": 1,
                "read": True,
            },
        ),
        "ping": Phase(
            "ping",
            "ping flood, 1 conn, reads",
            args.seconds,
            "control_flood",
            {"opcode": OP_PING, "payload": b"", "frames_per_write": 4096, "conns": 1, "read": True},
        ),
        "opens": Phase(
            "opens", "cold opens, 1 raw client", args.seconds, "cold_opens", {"timeout": 10.0}
        ),
        "vector": Phase(
            "vector",
            "vector opens+resets, 64 envs",
            args.seconds,
            "vector_opens",
            {"timeout": 120.0},
        ),
        "heavy": Phase(
            "heavy",
            "20 heavy-preprocessing sessions",
            args.seconds,
            "heavy_sessions",
            {"timeout": 60.0, "count": 20},
        ),
        "slowloris": Phase(
            "slowloris",
            f"slowloris, {args.slowloris} conns",
            args.seconds,
            "slowloris",
            {"count": args.slowloris, "rate": args.trickle_rate},
        ),
        "flood": Phase(
            "flood",
            f"ping flood, {args.flood_conns} conns, never read",
            args.flood_seconds,
            "control_flood",
            {
                "opcode": OP_PING,
                "payload": b"x" * 125,
                "frames_per_write": 512,
                "conns": args.flood_conns,
                "read": False,
            },
        ),
        "after": Phase("after", "after (no attack)", args.seconds),
    }
    keys = ["baseline", *(k for k in args.phases.split(",") if k and k != "baseline")]
    unknown = [k for k in keys if k not in every]
    if unknown:
        raise ValueError(f"unknown phase(s) {unknown}; choose from {', '.join(every)}")
    return [every[k] for k in keys]
