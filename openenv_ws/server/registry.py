"""The limits of a server process and the sessions it hosts (shared by every transport)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..footprint import MIB, default_memory_budget, default_thread_budget
from ..protocol import DEFAULT_MAX_FRAME_SIZE, PROTOCOL_VERSION
from ._session import ServerSession

__all__ = ["ServerLimits", "SessionRegistry"]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Limits of one server process.

    Attributes:
        max_sessions: sessions hosted at once; the next ``open`` gets ``capacity``.
            Each env of a vector session counts as a session.
        max_envs: the most envs one vector session may hold (SPEC section 21);
            an ``open`` with more gets ``bad_config``.
        max_frame_size: largest request frame in bytes (larger: close 1009).
        idle_timeout: seconds a connection may go without sending a request
            before the server closes it (``idle_timeout``, close 1001); None: never.
        resume_grace: seconds a session whose connection dropped waits for its
            client to resume it; 0 or None: sessions end with their connection.
        drain_timeout: seconds a draining server waits for replies still being
            written before it closes what is left.
        http_session_ttl: seconds an HTTP session (fallback routes or OpenEnv's
            HTTP routes) may go without a request before it is closed; None: never.
        step_timeout: seconds one call of an environment that is not inline
            (:attr:`~openenv_ws.environment.Environment.inline`) may take; a call
            past it ends its session with ``step_timeout``; so does a build off
            the event loop (``EnvPlugin.build_off_loop``). None: no deadline.
        cold_open_share: the largest fraction of time spent building
            environments for opens the warm pool cannot serve (they hold the
            GIL); the next such open waits its turn (1: no pacing). Also paces
            the warm pool's background builds.
        cold_open_queue: opens that may wait for their turn to build at once;
            the next gets ``capacity`` (close 1013).
        open_timeout: seconds a WebSocket connection may go without opening a
            session before the server closes it (``idle_timeout``, close 1001,
            the reason naming the open timeout); None: never.
        compression: codecs observations sent inline may be compressed with,
            preferred first, for clients that offer them (SPEC section 19);
            empty: never compress.
        memory_budget: bytes the sessions of the process may take together,
            each charged its footprint (``EnvPlugin.footprint``, computed from
            its config before anything is built); an ``open`` past it gets
            ``capacity`` naming the budget. Default: half of physical memory.
        max_engine_threads: threads the sessions' engines may start together
            (a vector session's C++ threads); past it, ``capacity``.
            Default: 32 per core (three 64-env Atari sessions on 2 cores).
        max_stuck_calls: environment calls past ``step_timeout`` that may still
            run (a Python thread cannot be stopped): their sessions leave the
            session count at the deadline, but their memory and threads stay
            charged until the call returns, and while this many run the
            server opens no session (``capacity``). Default: one per core.
        max_sessions_per_peer: sessions (weighed as for ``max_sessions``) one
            client address may hold at once, WebSocket and HTTP together; the
            next ``open`` from it gets ``capacity``. None: a quarter of
            ``max_sessions``, and never less than two vector sessions of
            ``max_envs`` (a client may hold one beside a few others; see
            :attr:`peer_quota`).
        http_unused_ttl: seconds an HTTP session may wait for its first request
            after the one that opened it before it is closed (an open nobody
            uses); None: only ``http_session_ttl`` applies.
    """

    max_sessions: int = 1024
    max_envs: int = 64
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    idle_timeout: float | None = 600.0
    resume_grace: float | None = 30.0
    drain_timeout: float = 10.0
    http_session_ttl: float | None = 300.0
    step_timeout: float | None = 60.0
    cold_open_share: float = 0.25
    cold_open_queue: int = 256
    open_timeout: float | None = 60.0
    compression: tuple[str, ...] = ("zstd", "lz4")
    memory_budget: int = field(default_factory=default_memory_budget)
    max_engine_threads: int = field(default_factory=default_thread_budget)
    max_stuck_calls: int = field(default_factory=lambda: os.cpu_count() or 1)
    max_sessions_per_peer: int | None = None
    http_unused_ttl: float | None = 30.0

    @property
    def peer_quota(self) -> int:
        """The sessions one client address may hold (``max_sessions_per_peer`` or its default)."""
        if self.max_sessions_per_peer is not None:
            return self.max_sessions_per_peer
        return min(self.max_sessions, max(self.max_sessions // 4, 2 * self.max_envs))


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
