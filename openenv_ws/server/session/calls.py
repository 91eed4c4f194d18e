"""One request of a session whose environment is not inline, served on its worker
thread under the ``step_timeout`` deadline (see :mod:`..runtime.offload`)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, overload

from ...protocol import ClientFrame, decode_client_frame, encode, parse_step
from .replies import FrameReply, Reply
from .server_session import ServerSession

__all__ = ["MAX_GIL_CALLS", "call", "timeout_message"]

logger = logging.getLogger("openenv_ws.server")

#: Calls of environments that hold the GIL (``Environment.holds_gil``) made at once
#: on worker threads, per process: every thread that wants the GIL beside the event
#: loop's makes the loop wait longer for it (a switch interval each), so such calls
#: (Atari sessions of heavy preprocessing) take turns; the loop then waits for one.
MAX_GIL_CALLS = 1
# The turns of those calls, per event loop.
_gil_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _gil_lane() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    lane = _gil_lanes.get(loop)
    if lane is None:
        lane = _gil_lanes[loop] = asyncio.Semaphore(MAX_GIL_CALLS)
    return lane


def _then(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        try:
            first()
        finally:
            second()

    return both


def timeout_message(deadline: float) -> str:
    """The message of a ``step_timeout`` error."""
    return (
        f"the environment did not answer within the server's deadline of {deadline:g} s "
        "per call; the session is closed and its environment abandoned. Open a new "
        "session; if such calls are expected to take longer, raise the deadline "
        "(openenv-ws serve --step-timeout SECONDS)"
    )


@overload
async def call(session: ServerSession, data: bytes, deadline: float | None) -> Reply: ...
@overload
async def call(session: ServerSession, data: ClientFrame, deadline: float | None) -> FrameReply: ...
async def call(
    session: ServerSession, data: bytes | ClientFrame, deadline: float | None
) -> Reply | FrameReply:
    """Serve `data` (a message, or a frame) for `session` on its worker thread, waiting
    at most `deadline` seconds; the reply comes in the form of the request.

    Requests of one session are served in the order they come (across
    connections too, after a resume). Past the deadline the session is
    abandoned (see :meth:`ServerSession.abandon`) and the reply is a fatal
    ``step_timeout`` error.
    """
    as_bytes = type(data) is bytes
    worker = session.worker()
    async with worker.lock:
        if not session.open_for_calls():
            closed = session.refuse("internal", "the session was closed while this request waited")
            return (encode(closed[0]), closed[1]) if as_bytes else closed
        lane = _gil_lane() if getattr(session.env, "holds_gil", False) else None
        if lane is not None:
            await lane.acquire()  # held until the call returns, past its deadline too
            if not session.open_for_calls():
                lane.release()
                closed = session.refuse(
                    "internal", "the session was closed while this request waited"
                )
                return (encode(closed[0]), closed[1]) if as_bytes else closed
        session.busy = True
        settle = session.settle if lane is None else _then(session.settle, lane.release)
        future: asyncio.Future[Any] = (
            worker.submit(session.handle, data, settle)
            if as_bytes
            else worker.submit(session.serve, data, settle)
        )
        try:
            async with asyncio.timeout(deadline):
                return await asyncio.shield(future)
        except TimeoutError:
            logger.warning(
                "session %s: an environment call missed the %g s deadline; abandoning it",
                session.session_id,
                deadline,
            )
            session.abandon()
            assert deadline is not None
            message = timeout_message(deadline)
            timeout = session.refuse("step_timeout", message, request_id=_request_id(data))
            return (encode(timeout[0]), timeout[1]) if as_bytes else timeout


def _request_id(data: bytes | ClientFrame) -> int | None:
    """The id of a request (to answer it); None if it cannot be read."""
    if not isinstance(data, bytes):
        return data.id
    step = parse_step(data)
    if step is not None:
        return step[0]
    try:
        return decode_client_frame(data, max_frame_size=len(data)).id
    except Exception:  # noqa: BLE001 - an unreadable request gets an error without an id
        return None
