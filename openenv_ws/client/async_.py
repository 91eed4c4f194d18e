"""The asynchronous client: ``async with AsyncEnvClient(...) as env``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, TypeVar, Unpack

from ..errors import InvalidState, RequestTimeout, ServerUnavailable, SessionClosed
from ..protocol import ClientFrame, ServerFrame, encode, encode_step
from ._aws import AsyncWebSocket
from ._core import DEFAULT, StepResult
from ._ops import SessionOps
from ._resume import Adopt, Connect, Discard, Effect, Exchange, Send, Sleep, resume, run_async
from ._ws import normalize_url
from .options import ClientOptions, SessionOptions

__all__ = ["AsyncEnvClient"]

ObsT = TypeVar("ObsT")


class AsyncEnvClient(SessionOps[ObsT]):
    """A session with a remote environment over one WebSocket (asyncio).

    Create it with ``await AsyncEnvClient.connect(url, config=...)`` or use it
    as ``async with AsyncEnvClient(url, config=...) as env``. Requests from
    several tasks on one client are served one at a time, in order.

    Args: as :class:`~openenv_ws.client.EnvClient`; its options are
    :class:`~openenv_ws.client.options.SessionOptions` (no ``busy_poll``).
    This client answers heartbeat pings in the background, so it stays
    connected between calls however long they are apart.
    """

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, Any] | None = None,
        **options: Unpack[SessionOptions],
    ) -> None:
        opts = ClientOptions.of(type(self).__name__, options, SessionOptions)
        self.url = normalize_url(url)
        self._ssl = opts.tls([self.url])
        self.timeout = opts.timeout
        self.open_timeout = opts.open_timeout
        self.resume_timeout = opts.resume_seconds
        self._core = opts.core(config)
        self._shared_memory = opts.shared_memory
        self._core.offer_compression(self.url, opts.compression, opts.delta)
        self._ws: AsyncWebSocket | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def connect(cls, url: str, **kwargs: Any) -> AsyncEnvClient[Any]:
        """Connect and open the session."""
        client = cls(url, **kwargs)
        await client.open()
        return client

    async def open(self) -> None:
        """Connect and send ``open``; called by ``async with`` and :meth:`connect`."""
        if self._ws is not None:
            return
        self._core.offer_shared_memory(self.url, self._shared_memory)
        try:
            self._ws = await self._connect(self.open_timeout)
            try:
                self._core.opened(await self._roundtrip(self._core.open_frame(), self.open_timeout))
            except BaseException:
                await self._ws.close()
                raise
        except BaseException:
            self._core.release()
            raise

    async def _connect(self, open_timeout: float | None) -> AsyncWebSocket:
        try:
            async with asyncio.timeout(open_timeout):
                ws = await AsyncWebSocket.connect(
                    self.url,
                    headers=self._core.headers(),
                    max_size=self._core.max_frame_size,
                    ssl_context=self._ssl,
                )
        except TimeoutError:
            raise ServerUnavailable(
                f"no WebSocket handshake answer from {self.url} within {open_timeout} s"
            ) from None
        self._core.handshake_answered(ws.response_headers, keep_descriptor=True)
        return ws

    async def _roundtrip(self, frame: ClientFrame, timeout: float | None) -> ServerFrame:
        return await self._send_request(encode(frame), frame.id, timeout, frame.OP)

    async def _send_request(
        self, data: bytes, rid: int, timeout: float | None, op: str
    ) -> ServerFrame:
        if self._ws is None:
            raise InvalidState(
                "the client is not open; use 'async with' or await open()", code="not_open"
            )
        if self._closed:
            raise self._core.closed_error or InvalidState(
                "the client is closed; create a new one to open another session", code="closed"
            )
        core = self._core
        async with self._lock:
            if core.closed_error is not None:
                raise core.closed_error
            try:
                ws = self._ws  # a resume by another request may have replaced it
                reply = await self._exchange(ws, data, rid, timeout, op)
            except SessionClosed as exc:
                procedure = resume(core, self, exc, data, rid, timeout)
                resumed = await run_async(procedure, lambda effect: self._perform(effect, op))
                assert resumed is not None  # the reply to `rid`
                reply = resumed
        return core.check(reply)

    async def _exchange(
        self, ws: AsyncWebSocket, data: bytes | None, rid: int, timeout: float | None, op: str
    ) -> ServerFrame:
        """Send one request (None: it is sent) and return its reply (late replies to
        earlier ones are skipped)."""
        decode, is_reply = self._core.decode, self._core.is_reply
        try:
            if data is not None:
                await ws.send(data)
            async with asyncio.timeout(timeout):
                while True:
                    reply = decode(await ws.recv())
                    if is_reply(rid, reply):
                        return reply
        except TimeoutError:
            raise RequestTimeout(
                f"no reply to '{op}' within {timeout} s; a late reply will be discarded"
            ) from None

    async def _perform(self, effect: Effect, op: str) -> Any:
        """Do one effect of the resume procedure (:func:`~._resume.resume`) of request `op`."""
        match effect:
            case Connect(timeout=timeout):
                return await self._connect(timeout)
            case Exchange(conn=ws, data=data, rid=rid, timeout=timeout):
                return await self._exchange(ws, data, rid, timeout, op if data is None else "open")
            case Send(conn=ws, data=data):
                await ws.send(data)
            case Adopt(conn=ws):
                self._ws = ws
            case Discard(conn=ws):
                await ws.close()
            case Sleep(seconds=seconds):
                await asyncio.sleep(seconds)
        return None

    async def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> StepResult[ObsT]:
        """Start a new episode (deterministic for a given seed)."""
        frame = self._core.reset_frame(seed, episode_id, options)
        return self._result(await self._roundtrip(frame, self._wait(timeout)))

    async def step(
        self, action: Any, *, obs: bool = True, timeout: float | None = DEFAULT
    ) -> StepResult[ObsT]:
        """Advance one step; with ``obs=False`` the observation is left out (None)."""
        rid = self._core.next_id()
        data = encode_step(rid, self._action_to_wire(action), obs)
        return self._result(await self._send_request(data, rid, self._wait(timeout), "step"))

    async def state(self, *, timeout: float | None = DEFAULT) -> Any:
        """The episode state (episode_id, step_count and environment details)."""
        return self._state(await self._roundtrip(self._core.state_frame(), self._wait(timeout)))

    async def snapshot(self, *, timeout: float | None = DEFAULT) -> bytes:
        """An opaque snapshot of the running episode, for :meth:`restore`."""
        frame = self._core.snapshot_frame()
        return self._snapshot(await self._roundtrip(frame, self._wait(timeout)))

    async def restore(
        self, snapshot: bytes, *, timeout: float | None = DEFAULT
    ) -> StepResult[ObsT]:
        """Continue the episode from `snapshot`; returns the observation there."""
        frame = self._core.restore_frame(snapshot)
        return self._result(await self._roundtrip(frame, self._wait(timeout)))

    async def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        self.resume_timeout = 0.0  # a session being closed is not worth resuming
        if self._closed or self._ws is None:
            self._closed = True
            self._core.release()
            return
        # Closing is best effort: the socket goes either way.
        with contextlib.suppress(Exception):
            await self._roundtrip(self._core.close_frame(), 5.0)
        self._closed = True
        await self._ws.close()
        self._core.release()

    async def __aenter__(self) -> AsyncEnvClient[ObsT]:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
