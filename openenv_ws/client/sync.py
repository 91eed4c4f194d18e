"""The synchronous client: one WebSocket, one remote environment instance."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Unpack

from ..errors import InvalidState, SessionClosed
from ..protocol import ClientFrame, ServerFrame, encode, encode_step
from ._core import ClientCore
from ._idle import CallGuard, keep_alive, read_last_words
from ._ops import BlockingSession
from ._resume import Adopt, Connect, Discard, Effect, Exchange, Send, Sleep, resume, run
from ._ws import BlockingWebSocket, normalize_url
from .options import BlockingOptions, ClientOptions

__all__ = ["EnvClient", "SocketSession", "exchange", "perform", "reply_to"]

ObsT = TypeVar("ObsT")


class SocketSession:
    """One session over one blocking WebSocket: connect and open, requests (a dropped
    connection resumed, the request in flight re-sent), heartbeats between calls, close.

    The :class:`~openenv_ws.client._ops.Link` of :class:`EnvClient` and of
    :class:`~openenv_ws.client.VectorSessionClient`; `core` says what ``open``
    asks for, `options` how to connect (:class:`~openenv_ws.client.options.ClientOptions`).
    """

    def __init__(self, url: str, core: ClientCore, options: ClientOptions) -> None:
        self.url = normalize_url(url)
        self._ssl = options.tls([self.url])
        self.open_timeout = open_timeout = options.open_timeout
        self.busy_poll = options.busy_poll
        self.resume_timeout = options.resume_seconds
        self._core = core
        core.offer_shared_memory(self.url, options.shared_memory)
        core.offer_compression(self.url, options.compression, options.delta)
        self._ws: BlockingWebSocket | None = None
        self._closing = False
        # Held around each call; the heartbeat thread reads only when it is free.
        self._guard = CallGuard()
        try:
            self._ws = self._connect(open_timeout)
            try:
                core.opened(self.roundtrip(core.open_frame(), open_timeout))
            except BaseException:
                self._ws.close()
                raise
        except BaseException:
            core.release()
            raise
        keep_alive(self._ws)

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
            ssl_context=self._ssl,
        )
        self._core.handshake_answered(ws.response_headers, keep_descriptor=True)
        return ws

    def roundtrip(self, frame: ClientFrame, timeout: float | None) -> ServerFrame:
        """Send `frame`, return its reply (error frames raise)."""
        return self.request(encode(frame), frame.id, timeout)

    def step(self, rid: int, action: Any, obs: bool, timeout: float | None) -> ServerFrame:
        """Send the step ``rid``, return its reply (the hot path: no frame object)."""
        return self.request(encode_step(rid, action, obs), rid, timeout)

    def request(
        self, data: bytes, rid: int, timeout: float | None, *, sent: bool = False
    ) -> ServerFrame:
        """Send `data`, request `rid` (unless it was `sent` already by :meth:`post`),
        and return its reply; error frames raise."""
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            return self._call(data, rid, timeout, sent)
        finally:
            guard.lock.release()

    def post(self, data: bytes) -> None:
        """Send `data` without waiting for its reply (:meth:`request` with
        ``sent=True`` takes it). A connection that dropped is resumed then."""
        guard = self._guard
        guard.lock.acquire()
        guard.calls += 1
        try:
            ws = self._ws
            if ws is None or self._closing:
                raise self._closed_error()
            with contextlib.suppress(SessionClosed):  # the reply's wait finds it closed
                ws.send(data)
        finally:
            guard.lock.release()

    def _call(self, data: bytes, rid: int, timeout: float | None, sent: bool) -> ServerFrame:
        """:meth:`request` with the guard held."""
        ws = self._ws
        core = self._core
        if ws is None or self._closing:
            raise self._closed_error()
        try:
            reply = exchange(ws, core, None if sent else data, rid, timeout)
        except SessionClosed as exc:
            read_last_words(ws, core)  # closed between calls: what the server said
            resumed = run(resume(core, self, exc, data, rid, timeout), self._perform)
            assert resumed is not None  # the reply to `rid`
            reply = resumed
        return core.check(reply)

    def _perform(self, effect: Effect) -> Any:
        """Do one effect of the resume procedure (:func:`~._resume.resume`)."""
        if isinstance(effect, Adopt):
            self._ws = effect.conn
            keep_alive(effect.conn)
            return None
        return perform(effect, self._core, self._connect)

    def _closed_error(self) -> Exception:
        if self._core.closed_error is not None:
            return self._core.closed_error
        ws = self._ws
        if ws is not None and ws.close_code not in (None, 1000):
            return SessionClosed(ws.close_code, ws.close_reason)
        return InvalidState(
            "the client is closed; create a new one to open another session", code="closed"
        )

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        self.resume_timeout = 0.0  # a session being closed is not worth resuming
        with self._guard.lock:
            ws = self._ws
            if ws is not None and not ws.closed and not self._closing:
                try:
                    frame = self._core.close_frame()
                    self._call(encode(frame), frame.id, 5.0, False)
                    ws.recv(self._core.decode, timeout=5.0)  # returns by the server's close frame
                except Exception:  # noqa: BLE001 - closing is best effort; the socket goes anyway
                    pass
                ws.close()
            self._closing = True
        self._core.release()

    def __del__(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None and not ws.closed:
            ws.close(timeout=0.5)


class EnvClient(BlockingSession[ObsT]):
    """A session with a remote environment over one WebSocket (blocking).

    Example::

        with EnvClient("ws://127.0.0.1:8000", config={"game": "pong"}) as env:
            result = env.reset(seed=0)
            result = env.step(1)

    Args:
        url: the server (``ws://host:port``, ``wss://`` for TLS, ``http(s)://host:port``
            or ``host:port``; the path defaults to ``/ws``).
        config: the environment configuration sent in ``open``.
        **options: the connection's options (:class:`~openenv_ws.client.options.BlockingOptions`,
            explained in :class:`~openenv_ws.client.options.ClientOptions`): ``token``,
            ``open_timeout``, ``timeout``, ``max_frame_size``, ``busy_poll``,
            ``resume``, ``resume_timeout``, ``shared_memory``, ``indexed_frames``,
            ``ca_file``, ``ssl_context``, ``allow_insecure_token``, ``compression``,
            ``delta``. :attr:`shared_memory_used`, :attr:`indexed_frames_used` and
            :attr:`compression` tell what the server accepted.

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
        TLSError: the server's certificate failed verification (the message
            names the problem), or one side speaks TLS and the other does not.
        ValueError: a token for a plain-text link to another host (before
            connecting), or bad TLS options.
    """

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, Any] | None = None,
        **options: Unpack[BlockingOptions],
    ) -> None:
        opts = ClientOptions.of(type(self).__name__, options)
        self.timeout = opts.timeout
        self._core = core = opts.core(config)
        self._link: SocketSession = SocketSession(url, core, opts)


def exchange(
    ws: BlockingWebSocket, core: ClientCore, data: bytes | None, rid: int, timeout: float | None
) -> ServerFrame:
    """Send `data` (None: it was sent) and return the answer to request `rid`, as
    :func:`reply_to`.

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


def perform(
    effect: Effect, core: ClientCore, connect: Callable[[float | None], BlockingWebSocket]
) -> Any:
    """Do one effect of the resume procedure on blocking WebSockets (all but :class:`Adopt`)."""
    match effect:
        case Connect(timeout=timeout):
            return connect(timeout)
        case Exchange(conn=ws, data=data, rid=rid, timeout=timeout):
            if data is not None:
                ws.send(data)
            return reply_to(ws, core, rid, timeout)
        case Send(conn=ws, data=data):
            ws.send(data)
        case Discard(conn=ws):
            ws.close(timeout=0.1)
        case Sleep(seconds=seconds):
            time.sleep(seconds)
        case _:
            raise AssertionError(f"unexpected effect {effect!r}")
    return None
