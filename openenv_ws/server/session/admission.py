"""Admission: the sessions a server process hosts right now, weighed against its limits."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...footprint import MIB
from ...protocol import PROTOCOL_VERSION
from ..limits import ServerLimits
from .server_session import ServerSession

__all__ = ["SessionRegistry"]


@dataclass(slots=True)
class SessionRegistry:
    """The sessions a server process hosts right now, and its counters."""

    limits: ServerLimits
    active: set[ServerSession] = field(default_factory=set)
    opened_total: int = 0
    #: What the active sessions weigh against ``max_sessions``: each counts its envs.
    envs: int = 0
    #: Called after every admit and release (e.g. to publish counts to other workers).
    on_change: Callable[[SessionRegistry], None] | None = None
    #: Per compression mode (e.g. ``"zstd+delta"``): [element bytes of the
    #: observations compressed, bytes they took on the wire] (SPEC section 19).
    observation_bytes: dict[str, list[int]] = field(default_factory=dict)
    #: Memory and engine threads the admitted sessions take (stuck ones included).
    bytes: int = 0
    threads: int = 0
    #: Sessions whose call missed its deadline and still runs.
    stuck: set[ServerSession] = field(default_factory=set)
    #: What the active sessions of each client address weigh (``max_sessions_per_peer``).
    peers: dict[str, int] = field(default_factory=dict)

    def refusal(self, session: ServerSession) -> tuple[str, str] | None:
        """Why `session` would not be admitted now (``capacity``), or None."""
        limits = self.limits
        weight = session.weight
        if self.envs + weight > limits.max_sessions:
            vector = (
                f" (a vector session of {weight} envs counts as {weight})" if weight > 1 else ""
            )
            return _capacity(
                f"the server hosts its maximum of {limits.max_sessions} sessions{vector}"
            )
        peer = self.peer_refusal(session.peer, weight)
        if peer is not None:
            return peer
        if len(self.stuck) >= limits.max_stuck_calls:
            return _capacity(
                f"{len(self.stuck)} environment calls past the step deadline still run on this "
                f"server (at most {limits.max_stuck_calls}: openenv-ws serve --max-stuck-calls); "
                "it opens no session until they return"
            )
        need = session.footprint
        if self.bytes + need.bytes > limits.memory_budget:
            return _capacity(
                f"this session needs {_mib(need.bytes)} of memory and the server's sessions "
                f"already take {_mib(self.bytes)} of its {_mib(limits.memory_budget)} budget "
                "(openenv-ws serve --memory-budget); ask for smaller observations or fewer envs"
            )
        if self.threads + need.threads > limits.max_engine_threads:
            return _capacity(
                f"this session's engine starts {need.threads} threads and the server's sessions "
                f"already run {self.threads} of at most {limits.max_engine_threads} "
                "(openenv-ws serve --max-engine-threads); ask for fewer with num_threads"
            )
        return None

    def peer_refusal(self, peer: str | None, weight: int) -> tuple[str, str] | None:
        """Why client address `peer` may not take a session of `weight` envs more
        (``capacity``), or None; a session of unknown address is not counted per peer."""
        if peer is None:
            return None
        quota = self.limits.peer_quota
        held = self.peers.get(peer, 0)
        if held + weight <= quota:
            return None
        return (
            "capacity",
            f"this client address holds {held} of the {quota} sessions one address may hold "
            f"(--max-sessions-per-peer; WebSocket and HTTP sessions count, each env of a vector "
            "session as one); close some or retry later",
        )

    def _count_peer(self, session: ServerSession, sign: int) -> None:
        peer = session.peer
        if peer is None:
            return
        held = self.peers.get(peer, 0) + sign * session.weight
        if held > 0:
            self.peers[peer] = held
        else:
            self.peers.pop(peer, None)

    def admit(self, session: ServerSession) -> tuple[str, str] | None:
        """Take `session` in, or say why not (``capacity``)."""
        refused = self.refusal(session)
        if refused is not None:
            return refused
        self._count_peer(session, 1)
        self.active.add(session)
        self.envs += session.weight
        self.bytes += session.footprint.bytes
        self.threads += session.footprint.threads
        self.opened_total += 1
        if self.on_change is not None:
            self.on_change(self)
        return None

    def release(self, session: ServerSession) -> None:
        """`session` ended: free what it took."""
        if session in self.active:
            self.active.discard(session)
            self.envs -= session.weight
            self._count_peer(session, -1)
            self._free(session)
        elif session in self.stuck:
            self.stuck.discard(session)
            self._free(session)
        if self.on_change is not None:
            self.on_change(self)

    def abandoned(self, session: ServerSession) -> None:
        """A call of `session` missed its deadline and still runs: the session leaves the
        count, its memory and threads stay charged until :meth:`release`."""
        if session in self.active:
            self.active.discard(session)
            self.envs -= session.weight
            self._count_peer(session, -1)
            self.stuck.add(session)
        if self.on_change is not None:
            self.on_change(self)

    def _free(self, session: ServerSession) -> None:
        self.bytes -= session.footprint.bytes
        self.threads -= session.footprint.threads

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "protocol": PROTOCOL_VERSION,
            "sessions": len(self.active),
            "max_sessions": self.limits.max_sessions,
            "envs": self.envs,
            "memory": {"used": self.bytes, "budget": self.limits.memory_budget},
            "engine_threads": {"used": self.threads, "budget": self.limits.max_engine_threads},
            "stuck_calls": len(self.stuck),
            "opened_total": self.opened_total,
            "pid": os.getpid(),
        }


def _capacity(why: str) -> tuple[str, str]:
    return "capacity", f"{why}; retry later or use another server"


def _mib(count: int) -> str:
    return f"{count / MIB:,.0f} MiB" if count >= MIB else f"{count:,} bytes"
