"""What an honest newcomer sees during an attack: ``/health`` (plain or over TLS) and new
WebSocket handshakes, tried on threads of the harness's process."""

from __future__ import annotations

import collections
import http.client
import ssl
import threading
import time
from typing import Any

import numpy as np

from .rawwire import Target, error_name, handshake

__all__ = ["health_ms", "health_stats", "probe", "tls_probe"]


def health_ms(
    host: str, port: int, timeout: float, context: ssl.SSLContext | None = None
) -> tuple[str, float]:
    """(``200`` or what went wrong, milliseconds) for one ``GET /health`` (over TLS with a
    `context`)."""
    start = time.perf_counter()
    conn = (
        http.client.HTTPConnection(host, port, timeout=timeout)
        if context is None
        else http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
    )
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


def health_stats(health: list[tuple[str, float]]) -> dict[str, Any]:
    """Counts and latencies of the answered (200) probes, what the others got."""
    answered = [ms for what, ms in health if what == "200"]
    return {
        "health_probes": len(health),
        "health_answered": len(answered),
        "health_failures": dict(collections.Counter(w for w, _ in health if w != "200")),
        "health_ms_p50": float(np.percentile(answered, 50)) if answered else None,
        "health_ms_p99": float(np.percentile(answered, 99)) if answered else None,
        "health_ms_max": max(answered, default=None),
    }


def _health_loop(
    target: Target,
    until: float,
    stop: threading.Event,
    period: float,
    out: list[tuple[str, float]],
    context: ssl.SSLContext | None = None,
) -> None:
    while not stop.is_set() and time.monotonic() < until:
        out.append(health_ms(*target, timeout=2.0, context=context))
        stop.wait(period)


def _run(threads: list[threading.Thread], until: float) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()) + 5)


def probe(target: Target, attacker: str, until: float, stop: threading.Event) -> dict[str, Any]:
    """``/health`` every 0.25 s and a new handshake every 0.5 s (alternating source addresses)."""
    health: list[tuple[str, float]] = []
    clients: dict[str, collections.Counter[str]] = {
        "127.0.0.1": collections.Counter(),
        attacker: collections.Counter(),
    }

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

    _run(
        [
            threading.Thread(
                target=_health_loop, args=(target, until, stop, 0.25, health), daemon=True
            ),
            threading.Thread(target=client_loop, daemon=True),
        ],
        until,
    )
    return {
        **health_stats(health),
        "new_clients": {source: dict(c) for source, c in clients.items()},
    }


def tls_probe(
    plain: Target, tls: Target, ca_file: str, until: float, stop: threading.Event
) -> dict[str, Any]:
    """``/health`` over TLS at `tls` (trusting `ca_file`) and plain at `plain`, each every 0.1 s."""
    context = ssl.create_default_context(cafile=ca_file)
    over_tls: list[tuple[str, float]] = []
    over_tcp: list[tuple[str, float]] = []
    _run(
        [
            threading.Thread(
                target=_health_loop, args=(tls, until, stop, 0.1, over_tls, context), daemon=True
            ),
            threading.Thread(
                target=_health_loop, args=(plain, until, stop, 0.1, over_tcp), daemon=True
            ),
        ],
        until,
    )
    return {"tls": health_stats(over_tls), "plain": health_stats(over_tcp)}
