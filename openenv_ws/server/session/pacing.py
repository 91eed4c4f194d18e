"""Pacing of cold opens: environments built while a session waits, off the warm pool.

Building an environment can hold the GIL for its whole duration (an ale-py
ROM load: ~70 ms), so while one is built nothing else of the process runs,
on the event loop or on a thread. One client opening sessions in a loop
would keep the process building and every other session waiting. So cold
builds take turns: after a build of ``d`` seconds the next one may start
``d * (1 / share - 1)`` seconds later, which keeps builds to at most
``share`` of the process's time, while other sessions are stepping (a
step served within the last :data:`BUSY_WINDOW` seconds): with nobody
stepping there is no one to stall, and a client opening many sessions at
once (a vector client starting) is not slowed. An open waiting for its turn waits
asynchronously (its connection's task sleeps; other sessions step
meanwhile), in arrival order; beyond ``max_waiting`` waiting opens the next
one is refused with ``capacity``, and so is one from a peer address that
already has a quarter of them waiting (so one address cannot fill the
queue). Opens served from the warm pool are not paced.

Environments whose plugin builds them off the event loop (on the opening
session's worker thread: Gymnasium, OpenEnv, ``module:factory``) stall
nobody while they build: they are not paced, and at most
:data:`MAX_BUILDS_OFF_LOOP` build at once (the others wait their turn, bounded
as above), so a flood of opens cannot start a thread each.

A vector session's open (``num_envs``) always builds (its envs are never
pooled) and is always built off the event loop, on its session's worker
thread, after the session was admitted (its weight is its env count). A
vector factory that takes a ``pace`` keyword (Atari's) builds in steps that
each hold the GIL (an engine of a few envs): each step takes a turn as a cold
build does, and rests its share after, so an open of 64 envs rests as long
as 64 cold builds would, and never stalls other sessions for more than one
step. The server's ``step_timeout`` bounds each step, not the turns waited
between. Other vector factories build in one step (a ``pace`` around it); a
plugin that builds off the loop builds in one of the MAX_BUILDS_OFF_LOOP
slots, not paced.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from time import perf_counter
from typing import Any, overload

from ...protocol import ClientFrame, Open, decode_client_frame, encode
from ..limits import setting_problem
from ..runtime.offload import build
from .replies import FrameReply, Reply
from .server_session import ServerSession
from .vector_envs import open_vector

__all__ = ["BUSY_WINDOW", "MAX_BUILDS_OFF_LOOP", "ColdOpens"]

#: Seconds after a step during which cold builds are paced.
BUSY_WINDOW = 1.0
#: Builds running at once off the event loop (``EnvPlugin.build_off_loop``).
MAX_BUILDS_OFF_LOOP = 4


class ColdOpens:
    """Turns of the cold builds of one server process.

    Args:
        share: the largest fraction of time spent in cold builds (1: no pacing).
        max_waiting: opens that may wait for their turn at once.
        factory: the sessions' environment factory; a
            :class:`~openenv_ws.server.runtime.pool.WarmPool` tells which opens it
            serves warm (``ready``, ``misses``). Without one, every open builds.
        last_step: the :func:`~time.perf_counter` time of the last step served
            by any session of the process (None: always paced).
    """

    def __init__(
        self,
        share: float,
        max_waiting: int,
        factory: Any = None,
        last_step: Callable[[], float] | None = None,
        deadline: float | None = None,
    ) -> None:
        problem = setting_problem("cold_open_share", share)
        if problem is not None:
            raise ValueError(f"cold-open share {problem}")
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {max_waiting}")
        self.share = share
        self.max_waiting = max_waiting
        #: Opens one peer address may have waiting at once.
        self.max_waiting_per_peer = max(1, max_waiting // 4)
        self._by_peer: dict[str, int] = {}
        self._ready: Callable[[Mapping[str, Any]], int] | None = getattr(factory, "ready", None)
        self._pool = factory if self._ready is not None else None
        self._factory = factory
        # Builds on the opening sessions' worker threads, MAX_BUILDS_OFF_LOOP at once.
        self._off_loop = bool(getattr(factory, "build_off_loop", False))
        self._deadline = deadline
        self._building = 0
        self._built_event: asyncio.Event | None = None
        self._last_step = last_step
        self._next = 0.0  # loop time before which no cold build starts
        self._turns: asyncio.Lock | None = None
        self.waiting = 0
        #: Cold builds done, opens that waited for their turn, opens refused.
        self.built = 0
        self.paced = 0
        self.refused = 0

    async def turn(self, peer: str | None = None) -> str | None:
        """Wait until a cold build may start; or why it may not wait (too many wait already).

        Args:
            peer: the address the open comes from (None: not counted per peer).
        """
        loop = asyncio.get_running_loop()
        if not self.waiting and (
            self._building < MAX_BUILDS_OFF_LOOP
            if self._off_loop
            else loop.time() >= self._next or not self.busy()
        ):
            return None
        by_peer = self._by_peer
        mine = by_peer.get(peer, 0) if peer is not None else 0
        if self.waiting >= self.max_waiting:
            self.refused += 1
            return f"{self.max_waiting} sessions already wait for their environment to be built"
        if mine >= self.max_waiting_per_peer:
            self.refused += 1
            return f"{mine} sessions from this address already wait for their environment"
        if self._turns is None:
            self._turns = asyncio.Lock()  # wakes its waiters in arrival order
        self.waiting += 1
        self.paced += 1
        if peer is not None:
            by_peer[peer] = mine + 1
        try:
            async with self._turns:
                while self._building >= MAX_BUILDS_OFF_LOOP:  # off the loop: a free slot
                    if self._built_event is None:
                        self._built_event = asyncio.Event()
                    await self._built_event.wait()
                # The rest, while someone steps (looked at again each BUSY_WINDOW).
                while (delay := self._next - loop.time()) > 0 and self.busy():
                    await asyncio.sleep(min(delay, BUSY_WINDOW))
        finally:
            self.waiting -= 1
            if peer is not None:
                left = by_peer[peer] - 1
                if left:
                    by_peer[peer] = left
                else:
                    del by_peer[peer]
        return None

    def busy(self) -> bool:
        """Whether other sessions are stepping (a cold build would stall them)."""
        last_step = self._last_step
        return last_step is None or perf_counter() - last_step() < BUSY_WINDOW

    def done(self, seconds: float) -> None:
        """A cold build took `seconds`: the next one waits its share of rest.

        Called right after the build, before the event loop runs anything
        else, so the next open in line sees it.
        """
        self.built += 1
        rest = seconds * (1 / self.share - 1)
        self._next = max(self._next, asyncio.get_running_loop().time() + rest)

    @overload
    async def serve(
        self, session: ServerSession, data: bytes, peer: str | None = None
    ) -> Reply: ...
    @overload
    async def serve(
        self, session: ServerSession, data: ClientFrame, peer: str | None = None
    ) -> FrameReply: ...
    async def serve(
        self, session: ServerSession, data: bytes | ClientFrame, peer: str | None = None
    ) -> Reply | FrameReply:
        """Serve a request (message or frame) of a session that is not open yet; an open
        that builds waits its turn. The reply comes in the form of the request.

        Args:
            peer: the address of the client (opens waiting are bounded per address).
        """
        frame = self._open_of(data)
        builds = self._builds(frame)
        refusal = None if builds is None else await self.turn(peer)
        if refusal is not None:
            refused = session.refuse(
                "capacity",
                f"{refusal} (builds are paced: openenv-ws serve --cold-open-share, "
                "--cold-open-queue); retry later",
                request_id=builds,
            )
            return (encode(refused[0]), refused[1]) if isinstance(data, bytes) else refused
        if builds is not None and frame is not None and frame.num_envs is not None:
            return await self._serve_vector(session, data, frame)
        pool = self._pool
        misses = pool.misses if pool is not None else 0
        start = perf_counter()
        out: Reply | FrameReply
        try:
            if (
                self._off_loop
                and builds is not None
                and frame is not None
                and frame.num_envs is None
                and session.open_refusal(frame) is None
            ):
                # The slot is held until the constructor returns, past the deadline too:
                # at most MAX_BUILDS_OFF_LOOP threads are ever in constructors.
                self._building += 1
                try:
                    session.prebuilt(
                        await build(
                            session.worker(),
                            self._factory,
                            dict(frame.config),
                            self._deadline,
                            self._returned,
                        )
                    )
                except TimeoutError:
                    assert self._deadline is not None
                    late = session.refuse(
                        "step_timeout",
                        f"building the environment took longer than the server's deadline "
                        f"of {self._deadline:g} s per call (openenv-ws serve --step-timeout)",
                        request_id=builds,
                    )
                    return (encode(late[0]), late[1]) if isinstance(data, bytes) else late
            out = session.handle(data) if isinstance(data, bytes) else session.serve(data)
        finally:
            session.drop_prebuilt()
            if builds is not None or (pool is not None and pool.misses != misses):
                if self._off_loop:
                    self.built += 1  # off the loop: nobody was stalled, no rest
                else:
                    self.done(perf_counter() - start)  # failed builds (a bad mode) count too
        return out

    async def _serve_vector(
        self, session: ServerSession, data: bytes | ClientFrame, frame: Open
    ) -> Reply | FrameReply:
        """Serve the open of a vector session that had its turn: admitted first, its envs
        built on the session's worker thread (a step at a time, each paced, unless the
        plugin builds off the loop: then in one of the MAX_BUILDS_OFF_LOOP slots)."""
        try:
            if session.reserve(frame):
                loop = asyncio.get_running_loop()
                deadline = self._deadline
                scope = asyncio.timeout(deadline)
                pace = None if self._off_loop else _Pace(self, loop, scope, deadline)
                if self._off_loop:
                    self._building += 1
                try:
                    session.prebuilt(
                        await build(
                            session.worker(),
                            lambda config: open_vector(self._factory, frame, pace=pace),
                            dict(frame.config),
                            deadline,
                            self._returned if self._off_loop else _nothing,
                            scope=scope,
                        )
                    )
                except TimeoutError:
                    assert deadline is not None
                    late = session.refuse(
                        "step_timeout",
                        f"building the envs took longer than the server's deadline of "
                        f"{deadline:g} s per step (openenv-ws serve --step-timeout)",
                        request_id=frame.id,
                    )
                    session.close()
                    return (encode(late[0]), late[1]) if isinstance(data, bytes) else late
                finally:
                    if pace is not None:
                        pace.abandoned = True  # a build still running stops at its next step
                    if self._off_loop:
                        self.built += 1
            # Refused (capacity, a bad num_envs...) by serve_open as it is, without a build.
            return session.handle(data) if isinstance(data, bytes) else session.serve(data)
        finally:
            session.drop_prebuilt()

    async def _rest(self) -> None:
        """Wait for the turn of the next step of a paced build (see :class:`_Pace`)."""
        loop = asyncio.get_running_loop()
        if self._turns is None:
            self._turns = asyncio.Lock()
        self.waiting += 1
        try:
            async with self._turns:
                while (delay := self._next - loop.time()) > 0 and self.busy():
                    await asyncio.sleep(min(delay, BUSY_WINDOW))
        finally:
            self.waiting -= 1

    def _returned(self) -> None:
        """A constructor off the event loop returned: its build slot is free."""
        self._building -= 1
        if self._built_event is not None:
            self._built_event.set()
            self._built_event = None

    @staticmethod
    def _open_of(data: bytes | ClientFrame) -> Open | None:
        """`data` as an ``open`` frame; None for any other request (or unreadable bytes)."""
        if isinstance(data, bytes):
            try:
                frame = decode_client_frame(data, max_frame_size=len(data))
            except Exception:  # noqa: BLE001 - the session refuses it itself
                return None
        else:
            frame = data
        return frame if isinstance(frame, Open) else None

    def _builds(self, frame: Open | None) -> int | None:
        """The request id (0 counts) of an open that will build its environment, else None."""
        if frame is None or frame.resume is not None:
            return None
        if self._ready is not None and frame.num_envs is None:  # vector envs are never pooled
            try:
                if self._ready(frame.config):
                    return None  # served warm
            except Exception:  # noqa: BLE001 - a config the pool cannot key: refused cheaply
                return None
        return frame.id

    def stats(self) -> dict[str, Any]:
        """Counters for ``/health``."""
        return {
            "share": self.share,
            "built": self.built,
            "paced": self.paced,
            "waiting": self.waiting,
            "refused": self.refused,
        }


class _Abandoned(Exception):
    """The open whose envs were being built went away: the build stops."""


class _Pace:
    """Turns of the steps of one vector build, taken from its worker thread.

    Calling it with a step's env count gives the context to build that step
    in: entering waits for the step's turn on the event loop (the first
    step had the open's), leaving counts its time as a cold build's.
    """

    def __init__(
        self,
        opens: ColdOpens,
        loop: asyncio.AbstractEventLoop,
        scope: asyncio.Timeout,
        deadline: float | None,
    ) -> None:
        self._opens = opens
        self._loop = loop
        self._scope = scope
        self._deadline = deadline
        self._first = True
        #: Set once nobody waits for the build any more.
        self.abandoned = False

    async def _turn(self) -> None:
        """The next step's turn; the deadline is off while it waits, and restarts after."""
        if self.abandoned:  # the open's scope is gone with it
            raise _Abandoned("the open was abandoned")
        scope = self._scope
        scope.reschedule(None)
        await self._opens._rest()
        if self.abandoned:
            raise _Abandoned("the open was abandoned")
        deadline = self._deadline
        scope.reschedule(None if deadline is None else self._loop.time() + deadline)

    @contextlib.contextmanager
    def __call__(self, envs: int) -> Iterator[None]:
        if self.abandoned:
            raise _Abandoned("the open was abandoned")
        if self._first:
            self._first = False
        else:
            asyncio.run_coroutine_threadsafe(self._turn(), self._loop).result()
        start = perf_counter()
        try:
            yield
        finally:
            seconds = perf_counter() - start
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._opens.done, seconds)


def _nothing() -> None:
    """No build slot to free: a vector build is paced by its steps' turns."""
