"""Prometheus metrics of one server process, served at ``GET /metrics``.

The step path only touches plain Python numbers: :meth:`LatencyHistogram.observe`
is one ``bisect`` and two additions (about 0.2 us, against about 1 us for
``prometheus_client.Histogram.observe``, which takes a lock). Everything is
turned into Prometheus families when ``/metrics`` is scraped, by a custom
collector; gauges (sessions, connections) are read from the server's live
state at that moment, so they cost nothing in between.

Behind several worker processes (``serve --workers N``) each worker
publishes a snapshot of its counts once a second (see
:class:`~openenv_ws.server.runtime.workers.WorkerBoard`), and whichever worker answers
``/metrics`` adds the others' last snapshots to its own live counts: the
``openenv_ws_*`` series are the whole server's (``openenv_ws_workers`` says
how many processes they cover), at most a second behind for the other
workers. The ``openenv_ws_process_*`` series are the answering worker's,
among them the pauses of Python's garbage collector (:class:`GCPauses`): a
full collection stops every session of the process while it runs.
"""

from __future__ import annotations

import gc
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from starlette.requests import Request
from starlette.responses import Response

from ...protocol import ERRORS

__all__ = ["COUNTERS", "GC_PAUSES", "STEP_BUCKETS", "GCPauses", "LatencyHistogram", "ServerMetrics"]

#: Upper bounds (seconds) of the step latency buckets: from a fast in-memory
#: step (tens of microseconds) to a slow simulator step.
STEP_BUCKETS: tuple[float, ...] = (
    25e-6,
    50e-6,
    100e-6,
    250e-6,
    500e-6,
    1e-3,
    2.5e-3,
    5e-3,
    10e-3,
    25e-3,
    50e-3,
    100e-3,
    250e-3,
    1.0,
)


#: Counters kept here (``openenv_ws_<name>_total``); see ``_HELP`` for their meaning.
COUNTERS = ("sessions_resumed", "resume_failures", "sessions_expired", "idle_closed", "replayed")


class LatencyHistogram:
    """A fixed-bucket histogram cheap enough for every step."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = STEP_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last slot is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Count one observation (``le`` semantics: a value equal to a bound falls in it)."""
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self, counts: list[int] | None = None) -> list[tuple[str, float]]:
        """Buckets as Prometheus wants them: ``(le, observations <= le)``, +Inf last.

        `counts`: per-bucket counts to use instead of this histogram's own
        (e.g. several processes' added up).
        """
        out: list[tuple[str, float]] = []
        running = 0
        own = self.counts if counts is None else counts
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), own, strict=True):
            running += n
            out.append((bound, running))
        return out


class GCPauses:
    """How long each garbage collection of this process took, by generation.

    Installed once per process (:meth:`install`) as a ``gc.callbacks`` hook:
    two clock reads per collection, and collections of the young generation
    happen every few hundred allocations of container objects.
    """

    def __init__(self) -> None:
        self.by_generation = [LatencyHistogram() for _ in range(3)]
        self._started = 0.0
        self._installed = False
        self._lock = threading.Lock()

    def install(self) -> GCPauses:
        """Start recording (idempotent)."""
        with self._lock:
            if not self._installed:
                gc.callbacks.append(self._hook)
                self._installed = True
        return self

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.by_generation[info["generation"]].observe(time.perf_counter() - self._started)


#: The process's collector pauses (every server of the process reports the same).
GC_PAUSES = GCPauses()


class ServerMetrics:
    """Counters of one server process and the ``/metrics`` route that exposes them.

    Args:
        gauges: called at scrape time; returns the current value of each gauge
            (``sessions``, ``sessions_parked``, ``connections``, ...) and of
            counters kept elsewhere (keys ending in ``_total``).
    """

    def __init__(self, gauges: Callable[[], Mapping[str, float]] | None = None) -> None:
        self.step_seconds = LatencyHistogram()
        # Every series exists from the start (at 0), as Prometheus expects of counters.
        self.errors: dict[str, int] = dict.fromkeys(ERRORS, 0)
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._gauges = gauges or dict
        #: The other worker processes' last snapshots (see :meth:`snapshot`), if any.
        self.peers: Callable[[], list[dict[str, Any]]] = list
        #: The index of this worker process (None: the only process).
        self.worker: Callable[[], int | None] = lambda: None
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))
        ProcessCollector(namespace="openenv_ws", registry=self.registry)
        self.gc_pauses = GC_PAUSES.install()
        #: Per compression mode: [observation bytes compressed, bytes sent] (the
        #: sessions' :attr:`~openenv_ws.server.session.admission.SessionRegistry.observation_bytes`).
        self.observation_bytes: dict[str, list[int]] = {}

    def error(self, code: str) -> None:
        """Count one ``error`` frame sent, by code."""
        self.errors[code] = self.errors.get(code, 0) + 1

    def count(self, name: str, n: int = 1) -> None:
        """Add to a named counter (exposed as ``openenv_ws_<name>_total``)."""
        self.counters[name] = self.counters.get(name, 0) + n

    def snapshot(self) -> dict[str, Any]:
        """This process's counts and gauges, as plain values (for the other workers)."""
        hist = self.step_seconds
        return {
            "counters": dict(self.counters),
            "errors": dict(self.errors),
            "gauges": dict(self._gauges()),
            "step_counts": list(hist.counts),
            "step_sum": hist.total,
            "observation_bytes": {k: list(v) for k, v in self.observation_bytes.items()},
        }

    def merged(self) -> dict[str, Any]:
        """:meth:`snapshot` added up with the other workers' (``workers``: how many)."""
        total = self.snapshot()
        peers = self.peers()
        for peer in peers:
            for key in ("counters", "errors", "gauges"):
                mine = total[key]
                for name, value in peer.get(key, {}).items():
                    if name == "draining":  # any worker draining
                        mine[name] = max(mine.get(name, 0), value)
                    else:
                        mine[name] = mine.get(name, 0) + value
            mine_bytes = total["observation_bytes"]
            for mode, pair in peer.get("observation_bytes", {}).items():
                have = mine_bytes.setdefault(mode, [0, 0])
                have[0] += pair[0]
                have[1] += pair[1]
            counts = peer.get("step_counts", [])
            if len(counts) == len(total["step_counts"]):
                pairs = zip(total["step_counts"], counts, strict=True)
                total["step_counts"] = [a + b for a, b in pairs]
                total["step_sum"] += peer.get("step_sum", 0.0)
        total["workers"] = 1 + len(peers)
        return total

    def text(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics``."""
        return Response(self.text(), media_type=CONTENT_TYPE_LATEST)


_HELP = {
    "sessions": "Sessions hosted by this process (attached and parked), each holding an environment.",
    "sessions_parked": "Sessions whose connection dropped, kept for resumption.",
    "connections": "Open WebSocket connections.",
    "max_sessions": "Configured maximum number of sessions.",
    "draining": "1 while the process drains on shutdown.",
    "sessions_opened": "Sessions opened.",
    "sessions_resumed": "Sessions resumed on a new connection.",
    "resume_failures": "Resume attempts refused (unknown or expired token).",
    "sessions_expired": "Parked sessions closed because their grace period ran out.",
    "idle_closed": "Connections closed by the idle timeout.",
    "replayed": "Requests answered from the reply cache after a resume.",
    "workers": "Server processes these metrics add up (1, or the --workers count).",
    "worker": "Index of the worker process that answered this scrape (0 without --workers).",
}


class _Collector:
    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        snap = m.merged()
        values: dict[str, Any] = {
            **snap["counters"],
            **snap["gauges"],
            "workers": snap["workers"],
            "worker": m.worker() or 0,
        }
        for name, value in sorted(values.items()):
            doc = _HELP.get(name.removesuffix("_total"), name.replace("_", " "))
            if name.endswith("_total") or name in snap["counters"]:
                yield CounterMetricFamily(
                    f"openenv_ws_{name.removesuffix('_total')}", doc, value=value
                )
            else:
                yield GaugeMetricFamily(f"openenv_ws_{name}", doc, value=value)
        errors = CounterMetricFamily(
            "openenv_ws_errors", "Error frames sent, by error code.", labels=["code"]
        )
        for code, n in sorted(snap["errors"].items()):
            errors.add_metric([code], n)
        yield errors
        sizes = CounterMetricFamily(
            "openenv_ws_observation_bytes",
            "Observations of compressed sessions, by compression mode: their element "
            "bytes (kind=raw) and what they took on the wire (kind=sent).",
            labels=["mode", "kind"],
        )
        for mode, (raw, sent) in sorted(snap["observation_bytes"].items()):
            sizes.add_metric([mode, "raw"], raw)
            sizes.add_metric([mode, "sent"], sent)
        yield sizes
        yield HistogramMetricFamily(
            "openenv_ws_step_seconds",
            "Server time to serve one step request (decode, environment step, encode).",
            buckets=m.step_seconds.cumulative(snap["step_counts"]),
            sum_value=snap["step_sum"],
        )
        pauses = HistogramMetricFamily(
            "openenv_ws_process_gc_pause_seconds",
            "Garbage collections of this process by generation (2: full), and how long "
            "each stopped it.",
            labels=["generation"],
        )
        for generation, hist in enumerate(m.gc_pauses.by_generation):
            pauses.add_metric([str(generation)], hist.cumulative(), hist.total)
        yield pauses
        yield GaugeMetricFamily(
            "openenv_ws_process_gc_frozen_objects",
            "Objects the collector no longer scans (built before serving, see gc.freeze).",
            value=gc.get_freeze_count(),
        )
