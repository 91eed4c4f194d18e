"""The scenarios; importing this package registers them all (in report order)."""

from __future__ import annotations

from . import (
    churn,
    codec,
    expand,
    floor,
    framing,
    hostile,
    http_fallback,
    latency,
    peer_openenv,
    providers,
    remote,
    rollout,
    sessions,
    structured,
    supervision,
    throughput,
    vector,
    wrapper,
)

__all__ = [
    "churn",
    "codec",
    "expand",
    "floor",
    "framing",
    "hostile",
    "http_fallback",
    "latency",
    "peer_openenv",
    "providers",
    "remote",
    "rollout",
    "sessions",
    "structured",
    "supervision",
    "throughput",
    "vector",
    "wrapper",
]
