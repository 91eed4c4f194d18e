"""The hostile run: one server, a neighbour session stepping, and attack phases one by one
(the TLS phase on a server of its own)."""

from __future__ import annotations

import contextlib
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
from ..servers import PeerUnavailable
from .attacks import attack_process
from .probes import probe, tls_probe
from .rawwire import MB, OP_PING, OP_PONG, Target
from .sessions import health_figures
from .tls import tls_server

__all__ = ["PHASES", "Bench", "Phase", "PhaseResult", "Settings", "phases"]

#: Every phase after the baseline, in the order they run.
PHASES = (
    "pong",
    "ping",
    "opens",
    "vector-opens",
    "heavy",
    "slowloris",
    "tls-idle",
    "flood",
    "largest",
    "largest-vector",
    "after",
)


@dataclass
class Settings:
    """What the hostile run does (the scenario derives it from the suite's options)."""

    seconds: float = 30.0
    flood_seconds: float = 60.0
    flood_conns: int = 10
    burst_mib: float = 4.0
    slowloris: int = 5000
    trickle_rate: float = 1.0
    #: Comma list of keys of :data:`PHASES`, or ``all``.
    phases: str = "all"
    attacker_address: str = "127.0.0.2"
    rss_cap_mb: float = 4096.0
    #: Envs of each session the vector-open phase opens, and the most opens it makes.
    vector_envs: int = 64
    vector_opens: int = 1000
    #: Sessions of the heavy phase, and the config each asks for (the first accepted).
    heavy: int = 20
    heavy_configs: tuple[dict[str, Any], ...] = ()
    #: The largest single-session configs and the largest of vector sessions of
    #: `largest_envs` envs (each list: the first accepted); the most sessions to open.
    largest_configs: tuple[dict[str, Any], ...] = ()
    largest_vector_configs: tuple[dict[str, Any], ...] = ()
    largest_envs: int = 64
    #: The server's session limit (``--max-sessions``): the largest phases open at most one more.
    largest_limit: int = 1024
    #: The largest phases stop once the server's RSS grows by this fraction of the memory
    #: available when they start (see :meth:`Bench.memory_cap` for a server with a budget).
    memory_fraction: float = 0.6
    #: Seconds one request of the session attacks may wait for its reply.
    request_timeout: float = 120.0
    #: Connections of the TLS phase, and its server's descriptor limit (soft and hard).
    tls_conns: int = 5000
    tls_nofile: int | None = 4096
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
    """Step Pong back to back until `stop`; every step's (start, seconds); reconnect on errors.

    A step that fails (a timeout, the server closing) counts with the time it waited.
    """
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
            if pending := inflight.value:  # a step that failed took at least this long
                starts.append(pending)
                seconds.append(clock() - pending)
            inflight.value = 0.0
            errors.append((clock(), f"{type(exc).__name__}: {exc}"[:200]))
            ready.set()
            stop.wait(0.5)
    results.put((starts.tobytes(), seconds.tobytes(), errors))


@dataclass
class Phase:
    """One attack (or none) for `seconds`.

    Attributes:
        grace: seconds the attacker may take past `seconds` to finish what it
            started (an open under way); the phase ends when it does.
        probes: ``slowloris`` (``/health`` and new handshakes) or ``tls``
            (``/health`` over TLS and plain) from this process meanwhile.
        server: ``tls``: the attack goes to a TLS server of its own, started
            for the phase.
        memory: stop at a cap drawn from the memory available (and the byte
            budget ``/health`` reports) instead of the settings' RSS cap.
    """

    key: str
    label: str
    seconds: float
    kind: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    grace: float = 0.0
    probes: str | None = None
    server: str = "main"
    memory: bool = False


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
    #: The RSS cap it ran under, in bytes, and /health's budget and byte figures at its start.
    rss_cap: float = 0.0
    budget: dict[str, float] = field(default_factory=dict)


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

    def memory_cap(self, budget: dict[str, float]) -> float:
        """The RSS cap of a memory phase, in bytes: what the server holds plus a share of the
        memory available now (`memory_fraction`; with a byte budget in /health, 0.9 of it and
        at most 1.25 times the budget, so that the budget's refusal can be seen)."""
        assert self.sampler is not None
        limit = budget_of(budget)
        share = 0.9 if limit else self.args.memory_fraction
        cap = self.sampler.rss() + float(psutil.virtual_memory().available) * share
        return min(cap, 1.25 * limit) if limit else cap

    def run_phase(self, phase: Phase) -> PhaseResult:
        assert self.sampler is not None
        notes = self.settle(self.args.settle_timeout)
        rss_before = self.sampler.rss()
        budget = health_figures(self.server.health(timeout=2.0))
        cap = self.memory_cap(budget) if phase.memory else self.args.rss_cap_mb * MB
        self.sampler.cap = cap
        self.sampler.over_cap.clear()
        with contextlib.ExitStack() as stack:
            target = self.target
            context: dict[str, Any] = {}
            if phase.server == "tls":
                try:
                    tls, context["ca"] = stack.enter_context(
                        tls_server(self.placement, self.args.tls_nofile)
                    )
                except (RuntimeError, PeerUnavailable) as exc:
                    notes.append(f"not run: the TLS server did not start: {exc}")
                    now = time.monotonic()
                    return PhaseResult(phase, now, now, rss_before, rss_before, notes=notes)
                assert tls.port is not None and tls.process is not None
                target = (tls.host, tls.port)
                limit = psutil.Process(tls.process.pid).rlimit(psutil.RLIMIT_NOFILE)
                notes.append(f"TLS server RLIMIT_NOFILE {limit[0]}/{limit[1]}")
            result = self._attack(phase, target, context, notes)
        result.rss_before, result.rss_cap, result.budget = rss_before, cap, budget
        return result

    def _attack(
        self, phase: Phase, target: Target, context: dict[str, Any], notes: list[str]
    ) -> PhaseResult:
        """Run `phase`'s attacker (and probes) against `target`; wait for the neighbour."""
        assert self.sampler is not None
        stop = self.ctx.Event()
        results: multiprocessing.Queue[dict[str, Any]] = self.ctx.Queue()
        attacker = None
        probes: dict[str, Any] = {}
        prober: threading.Thread | None = None
        probe_stop = threading.Event()
        t0 = time.monotonic()
        until = t0 + phase.seconds
        if phase.kind is not None:
            attacker = self.ctx.Process(
                target=attack_process,
                args=(
                    phase.kind,
                    target,
                    self.args.attacker_address,
                    {"seconds": phase.seconds, **phase.kwargs},
                    stop,
                    results,
                    self.client_cores,
                ),
                daemon=True,
            )
            attacker.start()
        if phase.probes is not None:

            def run_probes() -> None:
                if phase.probes == "tls":
                    got = tls_probe(self.target, target, context["ca"], until, probe_stop)
                else:
                    got = probe(target, self.args.attacker_address, until, probe_stop)
                probes.update(got)

            prober = threading.Thread(target=run_probes, daemon=True)
            prober.start()
        while (now := time.monotonic()) < until + phase.grace:
            if attacker is None and now >= until:
                break
            if attacker is not None and not attacker.is_alive():
                break
            if self.sampler.over_cap.is_set():
                notes.append(
                    f"stopped at the RSS cap ({self.sampler.cap / MB:.0f} MB) after "
                    f"{now - t0:.1f} s"
                )
                break
            if not self.server_alive():
                notes.append(f"the server died after {now - t0:.1f} s")
                break
            time.sleep(0.05)
        if now >= until + phase.grace and attacker is not None and phase.grace:
            notes.append(f"the attacker was still busy {phase.grace:.0f} s past its deadline")
        stop.set()
        t1 = time.monotonic()
        attack: dict[str, Any] = {}
        if attacker is not None:
            with contextlib.suppress(queue.Empty):
                attack = results.get(timeout=15 + (self.args.request_timeout if phase.grace else 0))
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
        return PhaseResult(phase, t0, t1, 0.0, rss_peak, attack, notes, probes)


def budget_of(figures: dict[str, float]) -> float | None:
    """The server's memory budget in bytes among /health's figures (``memory.budget``,
    SPEC section 9), or None for a server that reports none."""
    return figures.get("memory.budget")


def phases(args: Settings) -> list[Phase]:
    """The baseline, then the phases `args.phases` names (keys of :data:`PHASES`), in order."""
    slow = 2 * args.request_timeout  # the grace of an attack that may be mid-request
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
        "vector-opens": Phase(
            "vector-opens",
            f"vector opens, {args.vector_envs} envs, reset",
            args.seconds,
            "vector_opens",
            {
                "num_envs": args.vector_envs,
                "config": {"game": "pong"},
                "count": args.vector_opens,
                "timeout": args.request_timeout,
            },
            grace=slow,
        ),
        "heavy": Phase(
            "heavy",
            f"heavy sessions, {args.heavy} stepping",
            args.seconds,
            "heavy_sessions",
            {
                "count": args.heavy,
                "configs": list(args.heavy_configs),
                "timeout": args.request_timeout,
            },
            grace=6 * args.request_timeout,  # it opens and resets them all first
        ),
        "slowloris": Phase(
            "slowloris",
            f"slowloris, {args.slowloris} conns",
            args.seconds,
            "slowloris",
            {"count": args.slowloris, "rate": args.trickle_rate},
            probes="slowloris",
        ),
        "tls-idle": Phase(
            "tls-idle",
            f"TLS port, {args.tls_conns} idle conns",
            args.seconds,
            "slowloris",
            {"count": args.tls_conns, "rate": 0.0},
            probes="tls",
            server="tls",
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
        "largest": Phase(
            "largest",
            "largest single sessions, until refused",
            args.seconds,
            "largest_sessions",
            {
                "configs": list(args.largest_configs),
                "num_envs": None,
                "limit": args.largest_limit + 1,  # the refusal is what it waits for
                "timeout": args.request_timeout,
            },
            memory=True,
            grace=slow,
        ),
        "largest-vector": Phase(
            "largest-vector",
            f"largest vector sessions, {args.largest_envs} envs, until refused",
            args.seconds,
            "largest_sessions",
            {
                "configs": list(args.largest_vector_configs),
                "num_envs": args.largest_envs,
                "limit": args.largest_limit // args.largest_envs + 1,
                "timeout": args.request_timeout,
            },
            memory=True,
            grace=slow,
        ),
        "after": Phase("after", "after (no attack)", args.seconds),
    }
    names = PHASES if args.phases.strip() == "all" else args.phases.split(",")
    chosen = [k.strip() for k in names if k.strip() not in ("", "baseline")]
    unknown = [k for k in chosen if k not in every]
    if unknown:
        raise ValueError(
            f"unknown hostile phase(s) {', '.join(unknown)}; choose from {', '.join(PHASES)}"
        )
    return [every["baseline"], *(every[k] for k in chosen)]
