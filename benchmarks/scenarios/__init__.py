"""The scenarios; importing this package registers them all (in report order)."""

from __future__ import annotations

from . import http_fallback, latency, peer_openenv, providers, sessions, throughput

__all__ = ["http_fallback", "latency", "peer_openenv", "providers", "sessions", "throughput"]
