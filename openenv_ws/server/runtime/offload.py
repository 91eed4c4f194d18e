"""Calls of environments that are not bounded, served off the event loop under a deadline.

An environment whose calls are bounded by its config (``Environment.inline``,
e.g. Atari) is called inline on the event loop: that is the fast path. Any
other environment may take long or never return, so each of its session's
requests is served on a worker thread of that session (:class:`Worker`),
one at a time and in order, while the event loop serves everyone else.
:func:`openenv_ws.server.session.calls.call` awaits the reply for at most ``step_timeout`` seconds; a call
that misses it ends its session with ``step_timeout`` (close 1011), and its
environment is abandoned: closed once the call returns, never reused.

A call that holds the GIL in C (a C extension that does not release it)
still stops the whole process while it runs: Python cannot preempt it. The
deadline protects other sessions from Python code and from C code that
releases the GIL (sleeps, I/O, most numerical libraries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Worker", "build", "close_quietly"]

logger = logging.getLogger("openenv_ws.server")

R = TypeVar("R")


class Worker:
    """The thread that serves one session's requests, and the lock that keeps them in order.

    The thread is a daemon: one stuck in an environment call never keeps the
    process from exiting. It starts with the first call and ends once
    :meth:`stop` was called and the call in progress (if any) returned.
    """

    __slots__ = ("_jobs", "_thread", "lock")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(
        self, fn: Callable[[Any], R], data: Any, settle: Callable[[], None]
    ) -> asyncio.Future[R]:
        """Run ``fn(data)`` on the thread; the future gets its result after `settle` ran.

        `settle` runs on the event loop as soon as the call returns, whether
        or not anyone still awaits the future (a call past its deadline).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="openenv-ws-session", daemon=True
            )
            self._thread.start()
        self._jobs.put((fn, data, settle, future, loop))
        return future

    def discard(self, env: Any) -> bool:
        """Close `env` and let it go on the thread, after the call in progress (if any);
        False if the thread never started (the caller closes it)."""
        if self._thread is None:
            return False
        self._jobs.put((close_quietly, env, None, None, None))
        return True

    def stop(self) -> None:
        """End the thread after the call in progress, if any (idempotent)."""
        if self._thread is not None:
            self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, data, settle, future, loop = job
            del job
            if future is None:  # a discard: nobody waits
                fn(data)
                del fn, data
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(data)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settled, future, settle, result, error)


def _settled(
    future: asyncio.Future[Any],
    settle: Callable[[], None],
    result: Any,
    error: BaseException | None,
) -> None:
    settle()
    if future.done():  # given up on (deadline, cancelled task)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


async def build(
    worker: Worker,
    factory: Callable[[dict[str, Any]], Any],
    config: dict[str, Any],
    deadline: float | None,
    returned: Callable[[], None],
    *,
    scope: asyncio.Timeout | None = None,
) -> Any:
    """``factory(config)`` on `worker`'s thread: the environment, or the exception it
    raised (the open answers it as it would have answered the call on the loop).
    `returned` runs on the event loop once the factory has returned, awaited or not.
    `scope`: the deadline's scope, when the caller moves it (a build in steps, each
    with its own deadline); None: `deadline` seconds from now.

    Raises:
        TimeoutError: no environment within `deadline` seconds; the one built later,
            like one built for a caller that went away meanwhile, is closed.
    """
    made: list[Any] = []

    def run(cfg: dict[str, Any]) -> Any:
        made.append(factory(cfg))
        return made[-1]

    def settle() -> None:
        returned()
        if future.done() and made:  # given up on: nobody takes it
            close_quietly(made.pop())

    future: asyncio.Future[Any] = worker.submit(run, config, settle)
    if scope is None:
        scope = asyncio.timeout(deadline)
    try:
        async with scope:
            return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.cancel()
        raise
    except Exception as exc:  # what the factory raised is the open's answer
        if scope.expired():
            future.cancel()
            raise
        return exc


def close_quietly(env: Any) -> None:
    """Close an environment no session took; a failure is logged, never raised."""
    try:
        env.close()
    except Exception:
        logger.exception("closing an environment no session took failed")
