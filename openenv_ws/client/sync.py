"""The synchronous client: one WebSocket, one remote environment instance."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import InvalidState, OpenEnvError, SessionClosed
from ..protocol import (
    Close,
    GetState,
    Restore,
    Result,
    ServerFrame,
    Snapshot,
    SnapshotData,
    StateReply,
    encode,
    encode_step,
)
from ._core import (
    DEFAULT,
    ClientCore,
    SessionFacts,
    StepResult,
    on_local_server,
    plain_action,
    result_of,
)
from ._idle import CallGuard, keep_alive, read_last_words
from ._resume import Resumption, can_resume
from ._ws import BlockingWebSocket, normalize_url

if TYPE_CHECKING:
    from ..providers import ServerProvider

__all__ = ["EnvClient"]

logger = logging.getLogger("openenv_ws.client")

ObsT = TypeVar("ObsT")


class EnvClient(SessionFacts, Generic[ObsT]):
    """A session with a remote environment over one WebSocket (blocking).

    Example::

        with EnvClient("ws://127.0.0.1:8000", config={"game": "pong"}) as env:
            result = env.reset(seed=0)
            result = env.step(1)

    Args:
        url: the server (``ws://host:port``, ``http://host:port`` or ``host:port``;
            the path defaults to ``/ws``).
        config: the environment configuration sent in ``open``.
        token: bearer token, if the server requires one (default: the
            ``OPENENV_WS_TOKEN`` environment variable).
        open_timeout: seconds to connect and open the session (None: no limit).
        timeout: default seconds to wait for each reply (None: no limit).
        max_frame_size: largest reply accepted, in bytes.
        busy_poll: seconds to spin before sleeping while waiting for a reply
            (0: never spin). Spinning costs client CPU and saves the kernel's
            wake-up latency, which dominates step latency on some VMs.
        resume: when the connection drops mid-session, reconnect and resume
            the session transparently (the request in flight is re-sent and
            is applied once); if that is impossible, :class:`SessionClosed`
            says why.
        resume_timeout: seconds to keep trying to resume.
        shared_memory: when the server is on this host (a loopback URL), offer
            it a shared memory region so that large observations skip the
            socket (SPEC section 17); the server falls back to sending them
            inline when it cannot use it. :attr:`shared_memory_used` tells.
        indexed_frames: ask the server for RGB frames as palette indices, one
            byte per pixel instead of three, which this client expands (SPEC
            section 18); the observations are the same arrays. None (default):
            when the C expander is built (``openenv_ws._palette.NATIVE``).

    The server's heartbeat pings are answered during calls by the call itself
    and between calls by a background thread that reads the socket only while
    no call is in progress (:mod:`openenv_ws.client._idle`): however long the
    program works between two calls, the connection stays up. Only the
    server's ``--idle-timeout`` (600 s by default) ends a session that sends
    no request; the next call then raises :class:`SessionClosed` saying so.

    Raises:
        ServerUnavailable: nothing answers at `url`.
        AuthError: the server refused the token.
        RemoteEnvError: the server refused the configuration (code ``bad_config``).
    """

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, Any] | None = None,
        token: str | None = None,
        open_timeout: float | None = 30.0,
        timeout: float | None = 60.0,
        max_frame_size: int = 64 << 20,
        busy_poll: float = 0.0,
        resume: bool = True,
        resume_timeout: float = 30.0,
        shared_memory: bool = True,
        indexed_frames: bool | None = None,
    ) -> None:
        self.url = normalize_url(url)
        self.timeout = timeout
        self.open_timeout = open_timeout
        self.busy_poll = busy_poll
        self.resume_timeout = resume_timeout if resume else 0.0
        self._core = ClientCore(
            config or {},
            token=token,
            max_frame_size=max_frame_size,
            indexed_frames=indexed_frames,
        )
        self._core.offer_shared_memory(self.url, shared_memory)
        self._provider: ServerProvider | None = None
        self._ws: BlockingWebSocket | None = None
        self._closing = False
        # Held around each call; the heartbeat thread reads only when it is free.
        self._guard = CallGuard()
        try:
            self._ws = self._connect(open_timeout)
            try:
                self._core.opened(self._request(self._core.open_frame(), open_timeout))
            except BaseException:
                self._ws.close()
                raise
        except BaseException:
            self._core.release()
            raise
        keep_alive(self._ws)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_local(
        cls, *, config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> EnvClient[Any]:
        """Start a local server subprocess and open a session on it.

        The server stops when this client is closed.
        """
        return on_local_server(lambda url: cls(url, config=config, **kwargs))

    # ------------------------------------------------------------------ properties

    @property
    def closed(self) -> bool:
        return self._ws is None or self._ws.closed

    # ------------------------------------------------------------------ requests

    def _connect(self, open_timeout: float | None) -> BlockingWebSocket:
        ws = BlockingWebSocket(
            self.url,
            open_timeout=open_timeout,
            headers=self._core.headers(),
            max_size=self._core.max_frame_size,
            busy_poll=self.busy_poll,
            guard=self._guard,
        )
        self._core.handshake_answered(ws.response_headers, keep_descriptor=True)
        return ws

    def _request(self, frame: Any, timeout: float | None) -> ServerFrame:
        return self._send_request(encode(frame), frame.id, timeout)

    def _send_request(self, data: bytes, rid: int, timeout: float | None) -> ServerFrame:
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            return self._call(data, rid, timeout)
        finally:
            guard.lock.release()

    def _call(self, data: bytes, rid: int, timeout: float | None) -> ServerFrame:
        """:meth:`_send_request` with the guard held."""
        ws = self._ws
        if ws is None or self._closing:
            raise self._closed_error()
        try:
            reply = exchange(ws, self._core, data, rid, timeout)
        except SessionClosed as exc:
            read_last_words(ws, self._core)  # closed between calls: what the server said
            if self._core.closed_error is not None:
                raise self._core.closed_error from None
            if not (self.resume_timeout > 0 and can_resume(self._core, exc)):
                raise
            reply = self._resume(data, rid, timeout, exc)
        return self._core.check(reply)

    def _resume(self, data: bytes, rid: int, timeout: float | None, cause: SessionClosed) -> Any:
        """Reconnect, take the session back and re-send `data`; its reply, or raise why not."""
        logger.info("connection to %s dropped (%s); resuming the session", self.url, cause.reason)
        attempt = Resumption(self._core, self.url, cause, self.resume_timeout)
        while True:
            try:
                ws = self._connect(attempt.connect_timeout(self.open_timeout))
                try:
                    frame = attempt.open_frame()
                    ws.send(encode(frame))
                    attempt.opened(reply_to(ws, self._core, frame.id, self.open_timeout))
                except BaseException:
                    ws.close(timeout=0.1)
                    raise
                self._ws = ws
                keep_alive(ws)
                ws.send(data)
                return reply_to(ws, self._core, rid, timeout)
            except OpenEnvError as exc:
                time.sleep(attempt.retry_after(exc))

    def _closed_error(self) -> Exception:
        if self._core.closed_error is not None:
            return self._core.closed_error
        ws = self._ws
        if ws is not None and ws.close_code not in (None, 1000):
            return SessionClosed(ws.close_code, ws.close_reason)
        return InvalidState(
            "the client is closed; create a new one to open another session", code="closed"
        )

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = DEFAULT,
    ) -> StepResult[ObsT]:
        """Start a new episode (deterministic for a given seed)."""
        frame = self._core.reset_frame(seed, episode_id, options)
        reply = self._request(frame, self.timeout if timeout is DEFAULT else timeout)
        return self._result_from_wire(ClientCore.expect(reply, Result))

    def step(
        self, action: Any, *, obs: bool = True, timeout: float | None = DEFAULT
    ) -> StepResult[ObsT]:
        """Advance one step; with ``obs=False`` the observation is left out (None)."""
        rid = self._core.next_id()
        data = encode_step(rid, self._action_to_wire(action), obs)
        reply = self._send_request(data, rid, self.timeout if timeout is DEFAULT else timeout)
        if type(reply) is not Result:
            ClientCore.expect(reply, Result)
        return self._result_from_wire(reply)  # type: ignore[arg-type]

    def state(self, *, timeout: float | None = DEFAULT) -> Any:
        """The episode state (episode_id, step_count and environment details)."""
        reply = self._request(
            GetState(id=self._core.next_id()), self.timeout if timeout is DEFAULT else timeout
        )
        return self._state_from_wire(ClientCore.expect(reply, StateReply).state)

    def snapshot(self, *, timeout: float | None = DEFAULT) -> bytes:
        """An opaque snapshot of the running episode, for :meth:`restore`."""
        reply = self._request(
            Snapshot(id=self._core.next_id()), self.timeout if timeout is DEFAULT else timeout
        )
        snap: bytes = ClientCore.expect(reply, SnapshotData).snapshot
        return snap

    def restore(self, snapshot: bytes, *, timeout: float | None = DEFAULT) -> StepResult[ObsT]:
        """Continue the episode from `snapshot`; returns the observation there."""
        reply = self._request(
            Restore(id=self._core.next_id(), snapshot=bytes(snapshot)),
            self.timeout if timeout is DEFAULT else timeout,
        )
        return self._result_from_wire(ClientCore.expect(reply, Result))

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        self.resume_timeout = 0.0  # a session being closed is not worth resuming
        with self._guard.lock:
            ws = self._ws
            if ws is not None and not ws.closed and not self._closing:
                try:
                    frame = Close(id=self._core.next_id())
                    self._call(encode(frame), frame.id, 5.0)
                    ws.recv(self._core.decode, timeout=5.0)  # returns by the server's close frame
                except Exception:  # noqa: BLE001 - closing is best effort; the socket goes anyway
                    pass
                ws.close()
            self._closing = True
        self._core.release()
        if self._provider is not None:
            self._provider.stop()
            self._provider = None

    def __enter__(self) -> EnvClient[ObsT]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None and not ws.closed:
            ws.close(timeout=0.5)

    # ------------------------------------------------------------------ hooks for typed clients

    def _action_to_wire(self, action: Any) -> Any:
        """Turn a user action into the wire ``action`` value."""
        return plain_action(action)

    def _result_from_wire(self, frame: Result) -> StepResult[ObsT]:
        """Turn a ``result`` frame into the client's result type."""
        return result_of(frame)  # type: ignore[return-value]

    def _state_from_wire(self, state: dict[str, Any]) -> Any:
        """Turn a ``state`` map into the client's state type."""
        return state


def exchange(
    ws: BlockingWebSocket, core: ClientCore, data: bytes, rid: int, timeout: float | None
) -> ServerFrame:
    """Send `data` and return the answer to request `rid`, as :func:`reply_to`.

    A plain ``result`` is read and decoded in C where the module is built
    (:meth:`BlockingWebSocket.exchange`); every other frame by :func:`reply_to`.
    """
    request: bytes | None = data
    while True:
        fields = ws.exchange(request, timeout=timeout)
        if fields is None:
            return reply_to(ws, core, rid, timeout)
        request = None
        reply = core.native_result(fields)
        if reply.id == rid:
            return reply


def reply_to(
    ws: BlockingWebSocket, core: ClientCore, rid: int, timeout: float | None
) -> ServerFrame:
    """The answer to request `rid` on `ws`, skipping late replies to earlier requests."""
    decode, is_reply = core.decode, core.is_reply
    while True:
        reply = ws.recv(decode, timeout=timeout)
        if is_reply(rid, reply):
            return reply
