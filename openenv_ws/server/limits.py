"""The limits of a server process and the sessions it hosts (shared by every transport)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..footprint import default_memory_budget, default_thread_budget
from ..protocol import DEFAULT_MAX_FRAME_SIZE

__all__ = ["ServerLimits"]


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
