"""OpenEnv compatibility: OpenEnv's own clients, unchanged, against this server.

Two ways in, both driving the same :class:`~openenv_ws.server.ServerSession`
code as protocol v1:

- **WebSocket** ``/ws``: when the first message of a connection is a text
  message holding an OpenEnv JSON message (``{"type": "reset" | "step" |
  "state" | "close", "data": {...}}``), the connection speaks OpenEnv's
  dialect from then on (see :mod:`openenv_ws.openenv_dialect`); a binary
  first message selects protocol v1. Any other first text message, and any
  later text message on a protocol v1 connection, is refused as protocol v1
  refuses text (``text_frame``, close 1003). :class:`OpenEnvWebSocket`
  translates each OpenEnv message into one protocol v1 request frame and
  each reply frame back, so the connection is served by the same loop as any
  other (idle timeout, draining, metrics), with frame objects (nothing is
  encoded to be decoded again).
- **HTTP** ``POST /reset``, ``POST /step``, ``GET /state``, ``GET /schema``,
  ``GET /metadata`` (and ``POST /mcp``, see :mod:`openenv_ws.server.routes.openenv_mcp`): stateful per client. ``POST /reset`` without a session
  opens one and sets the cookie :data:`COOKIE` (``requests.Session``, used
  inside OpenEnv's HTTP clients, sends it back); later calls with the cookie
  reach the same environment, never another client's. Abandoned sessions
  expire with the HTTP fallback's TTL.

OpenEnv's messages carry no environment configuration, so sessions opened
this way use the server's ``openenv_config`` (for Atari: game, obs_type, ...).
``reset`` honours ``seed`` and ``episode_id``.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ...brief import brief, brief_keys
from ...errors import OpenEnvError, ProtocolError
from ...openenv_dialect import (
    action_from_openenv,
    dumps,
    legal_actions,
    metadata_payload,
    model_space,
    openenv_error_code,
    reset_fields,
    result_payload,
    schema_payload,
    state_payload,
)
from ...protocol import (
    ClientFrame,
    Closed,
    Error,
    Open,
    Opened,
    Result,
    ServerFrame,
    StateReply,
    client_frame_from_map,
    encode,
    error_frame,
)
from ..session.replies import CloseRequest
from ..session.server_session import ServerSession
from ..transport.asgi import Message
from .fallback import JSON, HTTPSessionStore, http_status, read_body

__all__ = [
    "COOKIE",
    "MESSAGE_TYPES",
    "OpenEnvCompat",
    "OpenEnvSession",
    "OpenEnvWebSocket",
    "parse_openenv_message",
    "reply_data",
    "request_frame",
]

#: The cookie that keeps an OpenEnv HTTP client's session.
COOKIE = "openenv_ws_session"
#: The message types of OpenEnv's WebSocket dialect.
MESSAGE_TYPES = frozenset({"reset", "step", "state", "close"})
_MESSAGE_KEYS = frozenset({"type", "data"})
_TYPES_TEXT = ", ".join(sorted(MESSAGE_TYPES))
# Unknown keys an error names (then how many more there are): replies never grow with the message.
_MOST_KEYS = 4
# What a non-JSON body of the HTTP routes may weigh at most.
_MAX_HTTP_BODY = 1 << 20


def parse_openenv_message(text: str) -> dict[str, Any] | None:
    """The OpenEnv message in a text frame, or None if it is not one."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(message) is not dict:
        return None
    kind = message.get("type")
    # Type-checked before the lookup: a list or an object is no message type (nor hashable).
    if type(kind) is not str or kind not in MESSAGE_TYPES:
        return None
    return message


def request_frame(kind: str, data: Any, rid: int, *, model: bool = False) -> ClientFrame:
    """The protocol v1 request for an OpenEnv request (``reset``/``step``/``state``/``close``);
    `model`: the session's actions are an OpenEnv Action model's fields.

    Raises:
        ProtocolError: (``bad_request``) the data does not make a valid request.
    """
    match kind:
        case "reset":
            raw: dict[str, Any] = {"op": "reset", "id": rid, **reset_fields(data)}
        case "step":
            raw = {"op": "step", "id": rid, "action": action_from_openenv(data, model=model)}
        case "state":
            raw = {"op": "state", "id": rid}
        case _:
            raw = {"op": "close", "id": rid}
    try:
        return client_frame_from_map(raw)
    except ProtocolError as exc:
        # The envelope is ours, so anything wrong is in the client's data.
        raise ProtocolError(str(exc), code="bad_request") from None


def reply_data(frame: ServerFrame, legal: list[int], *, model: bool = False) -> dict[str, Any]:
    """The ``data`` of OpenEnv's reply for a protocol v1 reply frame; `model`: the
    session's observations are an OpenEnv Observation model's dumps."""
    if type(frame) is Result:
        return result_payload(frame, legal, lists=False, model=model)
    if type(frame) is StateReply:
        return state_payload(frame.state)
    if isinstance(frame, Error):
        return error_data(frame.code, frame.message)
    return {}


def error_data(code: str, message: str) -> dict[str, Any]:
    """OpenEnv's error ``data``: its message (cut as protocol v1 cuts it, SPEC section 9)
    and code, plus the protocol's code."""
    message = error_frame(None, code, message).message
    return {"message": message, "code": openenv_error_code(code), "protocol_code": code}


class OpenEnvWebSocket:
    """Translates one WebSocket connection between OpenEnv's dialect and protocol v1.

    The connection's server loop sees the ``receive`` and ``send`` of this
    object. Until the first message arrives the dialect is undecided; a first
    text message holding an OpenEnv message selects OpenEnv's dialect, anything
    else protocol v1, after which both calls pass straight through (a method
    call, no extra coroutine). In OpenEnv's dialect an ``open`` with the
    server's OpenEnv config is sent on the client's behalf, each OpenEnv
    message becomes one protocol v1 request frame (``"frame"`` in the
    ``websocket.receive`` message), and each reply frame becomes OpenEnv's
    JSON; messages that make no valid request are answered here, in OpenEnv's
    words, and never reach the session. The first message is translated once
    the session is open, when its spaces are known (an OpenEnv model's action
    is the whole ``data``). A reply frame sent before the dialect is decided
    (a refusal) goes out as protocol v1 bytes.
    """

    __slots__ = (
        "_config",
        "_legal",
        "_model_action",
        "_model_obs",
        "_next_id",
        "_open_failed",
        "_open_id",
        "_queue",
        "_receive",
        "_send",
        "_spec_seen",
        "passthrough",
        "speaks_openenv",
    )

    def __init__(
        self,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
        config: Mapping[str, Any],
        spec_seen: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._receive = receive
        self._send = send
        self._config = dict(config)
        self._spec_seen = spec_seen
        self.passthrough = False
        self.speaks_openenv = False
        self._queue: deque[Message] = deque()
        self._legal: list[int] = []
        self._model_action = self._model_obs = False
        self._next_id = 0
        self._open_id = -1
        self._open_failed = False

    def receive(self) -> Awaitable[Message]:
        if self.passthrough:
            return self._receive()
        return self._translate_receive()

    def send(self, message: Message) -> Awaitable[None]:
        if self.passthrough:
            return self._send(message)
        return self._translate_send(message)

    def _id(self) -> int:
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        return self._next_id

    async def _translate_receive(self) -> Message:
        while True:
            if self._open_failed:
                # The server's config was refused: nothing can be served on this connection.
                return {"type": "websocket.disconnect", "code": 1011}
            if self._queue:
                first = self._queue.popleft()["message"]
                request = self._request(first)
                if type(request) is str:
                    await self._send_text(request)
                    continue
                return {"type": "websocket.receive", "frame": request}
            message = await self._receive()
            if message["type"] != "websocket.receive":
                return message
            text = message.get("text")
            if not self.speaks_openenv:
                first = parse_openenv_message(text) if text is not None else None
                if first is None:
                    self.passthrough = True  # protocol v1 (a text message is refused there)
                    return message
                self.speaks_openenv = True
                self._open_id = self._id()
                # This side reads structured values (SPEC section 22) for OpenEnv's client.
                opened = Open(id=self._open_id, config=self._config, structured=True)
                self._queue.append({"type": "openenv.request", "message": first})
                return {"type": "websocket.receive", "frame": opened}
            if text is None:
                # Refused as protocol v1 refuses a text message; the reply says why (below).
                return {"type": "websocket.receive", "text": ""}
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError) as exc:
                await self._send_text(_ws_error("INVALID_JSON", f"Invalid JSON: {exc}"))
                continue
            request = self._request(parsed)
            if type(request) is str:
                await self._send_text(request)
                continue
            return {"type": "websocket.receive", "frame": request}

    def _request(self, message: Any) -> ClientFrame | str:
        """The protocol v1 request frame for an OpenEnv message, or OpenEnv's error text."""
        if type(message) is not dict:
            return _ws_error("INVALID_JSON", "a message must be a JSON object")
        kind = message.get("type")
        if type(kind) is not str:
            return _ws_error(
                "VALIDATION_ERROR",
                f"Invalid message: 'type' must be a string, one of {_TYPES_TEXT}, "
                f"got {type(kind).__name__} {brief(kind)}",
            )
        if kind not in MESSAGE_TYPES:
            return _ws_error(
                "UNKNOWN_TYPE", f"Unknown message type: {brief(kind)}; send one of {_TYPES_TEXT}"
            )
        if len(message) > len(_MESSAGE_KEYS) or not message.keys() <= _MESSAGE_KEYS:
            extra = [key for key in message if key not in _MESSAGE_KEYS]
            return _ws_error(
                "VALIDATION_ERROR",
                f"Invalid message: unknown key(s) {brief_keys(extra, most=_MOST_KEYS)}; "
                "a message holds 'type' and 'data' only",
            )
        try:
            return request_frame(
                kind, message.get("data", {}), self._id(), model=self._model_action
            )
        except ProtocolError as exc:
            return dumps({"type": "error", "data": error_data(exc.code, str(exc))})

    async def _translate_send(self, message: Message) -> None:
        frame = message.get("frame")
        if frame is None:
            await self._send(message)
            return
        if not self.speaks_openenv:  # undecided: a refusal in protocol v1
            await self._send({"type": "websocket.send", "bytes": encode(frame)})
            return
        if type(frame) is Opened:
            self._legal = legal_actions(frame.spec)
            self._model_action = model_space(frame.spec, "action")
            self._model_obs = model_space(frame.spec, "observation")
            if self._spec_seen is not None:
                self._spec_seen(frame.spec)
            return
        if type(frame) is Closed:
            return  # OpenEnv's close gets no reply, only the close handshake
        if isinstance(frame, Error):
            message_text = frame.message
            if frame.code == "text_frame":
                message_text = (
                    "binary message on a connection that speaks OpenEnv's JSON dialect; "
                    "send JSON text messages (protocol v1 needs a new connection)"
                )
            reply = dumps({"type": "error", "data": error_data(frame.code, message_text)})
            await self._send_text(reply)
            if frame.id == self._open_id and not frame.fatal:
                self._open_failed = True
                await self._send(
                    {
                        "type": "websocket.close",
                        "code": 1011,
                        "reason": "the server's environment config was refused",
                    }
                )
            return
        reply_type = "state" if type(frame) is StateReply else "observation"
        try:
            data = reply_data(frame, self._legal, model=self._model_obs)
            text = dumps({"type": reply_type, "data": data})
        except ProtocolError as exc:  # a value of the environment JSON cannot carry
            await self._send_text(dumps({"type": "error", "data": error_data(exc.code, str(exc))}))
            await self._send({"type": "websocket.close", "code": 1011, "reason": "bad reply"})
            return
        await self._send_text(text)

    def _send_text(self, text: str) -> Awaitable[None]:
        return self._send({"type": "websocket.send", "text": text})


def _ws_error(code: str, message: str) -> str:
    message = error_frame(None, "bad_request", message).message  # never longer than v1's
    return dumps({"type": "error", "data": {"message": message, "code": code}})


class OpenEnvSession:
    """One OpenEnv HTTP client's session (a :class:`ServerSession`), sans-I/O.

    Args:
        session: the protocol v1 session that serves it.
        spec: the session's spec, when it is already open.
    """

    __slots__ = ("legal", "model_action", "model_obs", "session", "spec")

    def __init__(self, session: ServerSession, spec: dict[str, Any] | None = None) -> None:
        self.session = session
        self.spec = spec
        self.legal: list[int] = []
        self.model_action = self.model_obs = False
        if spec is not None:
            self._read(spec)

    def _read(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.legal = legal_actions(spec)
        self.model_action = model_space(spec, "action")
        self.model_obs = model_space(spec, "observation")

    async def open(
        self, store: HTTPSessionStore, config: Mapping[str, Any], peer: str | None
    ) -> Error | None:
        """Open the session with the server's OpenEnv config; the error frame if refused."""
        opening = Open(id=0, config=dict(config), structured=True)
        frame, _ = await store.serve(self.session, opening, peer)
        if isinstance(frame, Error):
            return frame
        assert isinstance(frame, Opened)
        self._read(frame.spec)
        return None

    async def request(
        self, store: HTTPSessionStore, kind: str, data: Any
    ) -> tuple[ServerFrame, CloseRequest | None]:
        """Serve one OpenEnv request; the reply frame and the close the session asks for."""
        try:
            frame = request_frame(kind, data, 0, model=self.model_action)
        except ProtocolError as exc:
            return error_frame(0, exc.code, str(exc)), None
        return await store.serve(self.session, frame)


class OpenEnvCompat:
    """The OpenEnv dialect of one server: its WebSocket translation and HTTP routes.

    Args:
        store: the HTTP session store (sessions opened by the HTTP routes live
            there, with its TTL, next to the HTTP fallback's).
        config: the environment config of every session opened through OpenEnv's dialect.
        version: reported by ``GET /metadata``.
    """

    def __init__(
        self, store: HTTPSessionStore, config: Mapping[str, Any] | None, version: str
    ) -> None:
        self.store = store
        self.config = dict(config or {})
        self.version = version
        self._spec: dict[str, Any] | None = None

    def websocket(
        self,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> OpenEnvWebSocket:
        """The translating ``receive``/``send`` pair for one accepted WebSocket connection."""
        return OpenEnvWebSocket(receive, send, self.config, self._remember_spec)

    def _remember_spec(self, spec: dict[str, Any]) -> None:
        self._spec = spec

    # ------------------------------------------------------------------ HTTP

    def routes(self) -> list[BaseRoute]:
        """``POST /reset``, ``POST /step``, ``GET /state``, ``GET /schema``, ``GET /metadata``
        (``POST /mcp`` is :mod:`openenv_ws.server.routes.openenv_mcp`'s)."""
        return [
            Route("/reset", _refusing(self.http_reset), methods=["POST"]),
            Route("/step", _refusing(self.http_step), methods=["POST"]),
            Route("/state", self.http_state, methods=["GET"]),
            Route("/schema", _refusing(self.http_schema), methods=["GET"]),
            Route("/metadata", _refusing(self.http_metadata), methods=["GET"]),
        ]

    async def _json_body(self, request: Request) -> Any:
        body = await read_body(request, max(self.store.max_frame_size, _MAX_HTTP_BODY))
        if not body.strip():
            return {}
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"the body is not valid JSON ({exc})") from None

    def _client(self, request: Request) -> OpenEnvSession | None:
        session_id = request.cookies.get(COOKIE)
        if not session_id:
            return None
        entry = self.store.get(session_id)
        if entry is None:
            return None
        return OpenEnvSession(entry.session, entry.spec)

    async def http_reset(self, request: Request) -> Response:
        body = await self._json_body(request)
        client = self._client(request)
        created = client is None
        if client is None:
            peer = request.client.host if request.client is not None else None
            client = OpenEnvSession(self.store.new_session(peer))
            error = await client.open(self.store, self.config, peer)
            if error is not None:
                client.session.close()
                return _http_error(error.code, error.message)
            assert client.spec is not None
            self.store.add(client.session, client.spec)
            self._spec = client.spec
        frame, close = await client.request(self.store, "reset", body)
        response = self._reply(client, frame, close)
        if created:
            response.set_cookie(COOKIE, client.session.session_id, httponly=True, samesite="lax")
        return response

    async def http_step(self, request: Request) -> Response:
        body = await self._json_body(request)
        client = self._client(request)
        if client is None:
            return self._no_session(request, "step")
        if type(body) is not dict or "action" not in body:
            return _http_error(
                "bad_request", "the body must be a JSON object with an 'action' object"
            )
        # timeout_s and request_id are accepted and unused: the server's step_timeout applies.
        frame, close = await client.request(self.store, "step", body["action"])
        return self._reply(client, frame, close)

    async def http_state(self, request: Request) -> Response:
        client = self._client(request)
        if client is None:
            # Like OpenEnv's server, a client without an episode sees an empty state.
            return _json_response({"episode_id": None, "step_count": 0})
        frame, close = await client.request(self.store, "state", None)
        return self._reply(client, frame, close)

    async def http_schema(self, request: Request) -> Response:
        return _json_response(schema_payload(await self._spec_for(request)))

    async def http_metadata(self, request: Request) -> Response:
        return _json_response(metadata_payload(await self._spec_for(request), self.version))

    async def _spec_for(self, request: Request) -> dict[str, Any]:
        client = self._client(request)
        if client is not None and client.spec is not None:
            return client.spec
        if self._spec is None:
            # No session yet: build one environment off the loop to read its spec.
            self._spec = await asyncio.to_thread(self._probe_spec)
        return self._spec

    def _probe_spec(self) -> dict[str, Any]:
        env = self.store.env_factory(dict(self.config))
        try:
            return env.spec.to_wire()
        finally:
            env.close()

    def _reply(
        self, client: OpenEnvSession, frame: ServerFrame, close: CloseRequest | None
    ) -> Response:
        if close is not None:
            self.store.drop(client.session.session_id)
        if isinstance(frame, Error):
            return _http_error(frame.code, frame.message)
        try:
            return _json_response(reply_data(frame, client.legal, model=client.model_obs))
        except ProtocolError as exc:  # a value of the environment JSON cannot carry
            self.store.drop(client.session.session_id)
            return _http_error(exc.code, str(exc))

    def _no_session(self, request: Request, op: str) -> Response:
        session_id = request.cookies.get(COOKIE)
        if session_id:
            code, message = self.store.missing(session_id)
            return _http_error(code, f"{message} (POST /reset starts a new one)")
        return _http_error(
            "not_reset",
            f"'{op}' without a session: POST /reset first and keep the '{COOKIE}' cookie "
            "it sets (a requests.Session does)",
        )


def _refusing(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """`handler`, with a body it cannot read (too big, not JSON) answered as OpenEnv's error."""

    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except OpenEnvError as exc:
            return _http_error(exc.code, str(exc))

    return route


def _json_response(payload: Any, status: int = 200) -> Response:
    return Response(dumps(payload), status, media_type=JSON)


def _http_error(code: str, message: str) -> Response:
    body = {"detail": message, **error_data(code, message)}
    headers = {"Retry-After": "1"} if code == "capacity" else None
    return Response(dumps(body), http_status(code), headers=headers, media_type=JSON)
