"""The HTTP fallback client: the :class:`~openenv_ws.client.EnvClient` API over plain HTTP.

For networks where WebSockets do not pass. Each call is one HTTP request on
a kept-alive connection (:mod:`openenv_ws.client._http_conn`) to the server's
``/v1/sessions`` routes; bodies are protocol v1 frames in
MessagePack (default) or their JSON view.

It also runs clients written in the style of OpenEnv's ``HTTPEnvClient``: a
subclass that defines ``_step_payload(action) -> dict``,
``_parse_result(payload) -> result`` and ``_parse_state(payload) -> state``
gets OpenEnv's JSON shapes (see :mod:`openenv_ws.openenv_dialect`) while the
session still travels as protocol v1 frames.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Unpack
from urllib.parse import urlsplit

from ..errors import InvalidState, ProtocolError, ServerUnavailable
from ..jsonview import frame_to_json, server_frame_from_json
from ..openenv_dialect import (
    action_from_openenv,
    legal_actions,
    model_space,
    result_payload,
    state_payload,
)
from ..protocol import ClientFrame, Opened, Result, ServerFrame, Step, encode
from ._core import ClientCore, StepResult
from ._http_conn import HTTPConnection
from ._ops import BlockingSession
from ._ws import normalize_url
from .options import ClientOptions, TransportOptions

__all__ = ["HTTPEnvClient", "HTTPLink", "http_base"]

ObsT = TypeVar("ObsT")

_SESSIONS = "/v1/sessions"
# Each op's method and path below the session's (its frame is the body, but ``state``'s).
_ROUTES = {
    "reset": ("POST", "/reset"),
    "step": ("POST", "/step"),
    "state": ("GET", "/state"),
    "snapshot": ("POST", "/snapshot"),
    "restore": ("POST", "/restore"),
    "close": ("DELETE", ""),
}
_MSGPACK = "application/msgpack"
_JSON = "application/json"


logger = logging.getLogger("openenv_ws.client.http")


def http_base(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path prefix) of a server URL; a trailing ``/ws`` is dropped."""
    parts = urlsplit(normalize_url(url, path=""))  # checks the scheme and the host
    scheme = "https" if parts.scheme == "wss" else "http"
    prefix = parts.path.rstrip("/").removesuffix("/ws")
    port = parts.port or (443 if scheme == "https" else 80)
    assert parts.hostname is not None
    return scheme, parts.hostname, port, prefix


class HTTPEnvClient(BlockingSession[ObsT]):
    """A session with a remote environment over the HTTP fallback (blocking).

    Same API as :class:`~openenv_ws.client.EnvClient`::

        with HTTPEnvClient("http://127.0.0.1:8000", config={"game": "pong"}) as env:
            result = env.reset(seed=0)
            result = env.step(1)

    Args:
        url: the server (``http://host:port``, ``ws://host:port[/ws]`` or
            ``host:port``). ``base_url`` is accepted as another name for it,
            as OpenEnv's clients call it.
        config: the environment configuration sent in ``open``.
        **options: :class:`~openenv_ws.client.options.TransportOptions`, as
            :class:`~openenv_ws.client.EnvClient` has them: ``token`` (sent as
            ``Authorization: Bearer`` with every request), ``open_timeout``,
            ``timeout``, ``max_frame_size``, ``ca_file``, ``ssl_context`` and
            ``allow_insecure_token`` (TLS for ``https://`` and the token rule),
            ``compression`` (with the msgpack encoding, never as deltas: a lost
            reply would leave the two sides out of step).
        encoding: ``"msgpack"`` (the protocol frames themselves) or ``"json"``
            (their JSON view, for debugging and for proxies that only pass
            text).
        retry_timeout: seconds to keep re-sending a session's request when the
            connection fails before its reply arrives (0: never). The server
            answers a repeated request from its last reply, so a step whose
            reply was lost is applied once.

    Subclasses in OpenEnv's style define ``_step_payload``, ``_parse_result``
    and ``_parse_state`` (see the module docstring).

    Raises:
        ServerUnavailable: nothing answers at `url`.
        RemoteEnvError: the server refused the session (``bad_config``,
            ``capacity``, ...).
        TLSError: the server's certificate failed verification, or one side
            speaks TLS and the other does not (never retried).
        ValueError: a token for a plain-text link to another host (before
            connecting), or bad TLS options.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        base_url: str | None = None,
        config: Mapping[str, Any] | None = None,
        encoding: Literal["msgpack", "json"] = "msgpack",
        retry_timeout: float = 30.0,
        **options: Unpack[TransportOptions],
    ) -> None:
        if (url is None) == (base_url is None):
            raise TypeError("pass the server's URL once, as url or as base_url")
        address = url if url is not None else base_url
        assert address is not None
        if encoding not in ("msgpack", "json"):
            raise ValueError(f"encoding must be 'msgpack' or 'json', got {encoding!r}")
        opts = ClientOptions.of(type(self).__name__, options, TransportOptions)
        self.timeout = opts.timeout
        # Full-colour frames: the fallback keeps to the plainest form of the protocol.
        self._core = opts.core(config, indexed_frames=False)
        self._link: HTTPLink = HTTPLink(address, self._core, opts, encoding, retry_timeout)
        # OpenEnv-style hooks, looked up once.
        self._step_payload_hook = getattr(self, "_step_payload", None)
        self._parse_result_hook = getattr(self, "_parse_result", None)
        self._parse_state_hook = getattr(self, "_parse_state", None)
        opened = self._link.open(opts.open_timeout)
        self._legal = legal_actions(opened.spec)
        # Whether actions and observations are OpenEnv models (json spaces).
        self._model_action = model_space(opened.spec, "action")
        self._model_obs = model_space(opened.spec, "observation")

    @property
    def encoding(self) -> str:
        """How frames travel: ``"msgpack"`` or ``"json"``."""
        return self._link.encoding

    @property
    def retry_timeout(self) -> float:
        """Seconds a session's request is re-sent while the connection fails."""
        return self._link.retry_timeout

    # ------------------------------------------------------------------ hooks

    def _action_to_wire(self, action: Any) -> Any:
        """Turn a user action into the wire ``action`` value."""
        if self._step_payload_hook is not None:
            payload = self._step_payload_hook(action)
            return action_from_openenv(payload, model=self._model_action)
        return super()._action_to_wire(action)

    def _result_from_wire(self, frame: Result) -> StepResult[ObsT]:
        """Turn a ``result`` frame into the client's result type."""
        if self._parse_result_hook is not None:
            payload = result_payload(frame, self._legal, model=self._model_obs)
            parsed: StepResult[ObsT] = self._parse_result_hook(payload)
            return parsed
        return super()._result_from_wire(frame)

    def _state_from_wire(self, state: dict[str, Any]) -> Any:
        """Turn a ``state`` map into the client's state type."""
        if self._parse_state_hook is not None:
            return self._parse_state_hook(state_payload(state))
        return super()._state_from_wire(state)


class HTTPLink:
    """One session's requests over a kept-alive HTTP connection to the fallback's
    routes: the :class:`~openenv_ws.client._ops.Link` of :class:`HTTPEnvClient`.

    Args:
        address: the server, as :class:`HTTPEnvClient` takes it.
        core: the session's protocol state.
        options: the client's options (TLS, token, compression).
        encoding, retry_timeout: :class:`HTTPEnvClient`'s.
    """

    def __init__(
        self,
        address: str,
        core: ClientCore,
        options: ClientOptions,
        encoding: Literal["msgpack", "json"],
        retry_timeout: float,
    ) -> None:
        scheme, host, port, prefix = http_base(address)
        server = normalize_url(address, path="").replace("ws", "http", 1)
        tls = options.tls([server])
        self.url = f"{scheme}://{host}:{port}{prefix}"
        self.encoding = encoding
        self.retry_timeout = retry_timeout
        self._core = core
        # A reply lost on the way is retried here unnoticed by the server: no delta frames.
        core.offer_compression(
            self.url, options.compression if encoding == "msgpack" else None, False
        )
        media = _MSGPACK if encoding == "msgpack" else _JSON
        headers = {"Content-Type": media, "Accept": media, **core.headers()}
        self._conn = HTTPConnection(scheme, host, port, headers, tls)
        self._prefix = prefix
        self._path: str | None = None
        self._closed = False

    def open(self, timeout: float | None) -> Opened:
        """Open the session (``POST /v1/sessions``); its ``opened``, taken by the core."""
        try:
            frame = self._core.open_frame()
            opened = self._core.opened(
                self._exchange("POST", self._prefix + _SESSIONS, frame, timeout)
            )
        except BaseException:
            self._conn.close()
            raise
        self._path = f"{self._prefix}{_SESSIONS}/{opened.session_id}"
        return opened

    # ------------------------------------------------------------------ properties

    @property
    def closed(self) -> bool:
        return self._closed or self._core.closed_error is not None

    # ------------------------------------------------------------------ requests

    def _exchange(
        self, method: str, path: str, frame: ClientFrame | None, timeout: float | None
    ) -> ServerFrame:
        """One request, its reply frame checked (error frames raise)."""
        body = None
        if frame is not None:
            body = encode(frame) if self.encoding == "msgpack" else frame_to_json(frame)
        status, media, data = self._send(method, path, body, timeout)
        try:
            if media.startswith(_MSGPACK):
                reply = self._core.decode(memoryview(data))
            elif media.startswith(_JSON):
                reply = server_frame_from_json(data)
            else:
                raise ProtocolError(f"content type '{media}' is not a protocol v1 body")
        except ProtocolError as exc:
            if 200 <= status < 300:
                raise
            snippet = data[:200].decode("utf-8", "replace")
            raise ServerUnavailable(
                f"{method} {self.url}{path[len(self._prefix) :]} answered HTTP {status} "
                f"without a protocol v1 reply ({exc}): {snippet!r}; is this an openenv-ws server?"
            ) from None
        return self._core.check(reply)

    def _send(
        self, method: str, path: str, body: bytes | None, timeout: float | None
    ) -> tuple[int, str, bytearray]:
        """The reply to one request; a session's request is re-sent, the same bytes,
        while the connection fails, for up to ``retry_timeout`` seconds."""
        deadline = time.monotonic() + self.retry_timeout
        pause = 0.02
        while True:
            try:
                return self._conn.request(method, path, body, timeout, self._core.max_frame_size)
            except ServerUnavailable as exc:
                # Opening is not retried: a lost ``opened`` would leave a session behind.
                if self._path is None or time.monotonic() + pause > deadline:
                    raise
                logger.info("%s %s failed (%s); sending it again", method, path, exc)
                time.sleep(pause)
                pause = min(2 * pause, 1.0)

    def roundtrip(self, frame: ClientFrame, timeout: float | None) -> ServerFrame:
        """Send `frame` to its route, return its reply (error frames raise)."""
        if self._closed or self._path is None:
            raise self._core.closed_error or InvalidState(
                "the client is closed; create a new one to open another session", code="closed"
            )
        if self._core.closed_error is not None:
            raise self._core.closed_error
        method, route = _ROUTES[frame.OP]
        body = frame if method != "GET" else None
        return self._exchange(method, self._path + route, body, timeout)

    def step(self, rid: int, action: Any, obs: bool, timeout: float | None) -> ServerFrame:
        """Send the step ``rid``, return its reply."""
        return self.roundtrip(Step(id=rid, action=action, obs=obs), timeout)

    def close(self) -> None:
        """Close the session and free the server's environment. Idempotent."""
        if not self._closed:
            self._closed = True
            self.retry_timeout = 0.0  # a session being closed is not worth waiting for
            if self._path is not None and self._core.closed_error is None:
                # Closing is best effort: the server's TTL frees the session anyway.
                with contextlib.suppress(Exception):
                    self._exchange("DELETE", self._path, self._core.close_frame(), 5.0)
            self._conn.close()
