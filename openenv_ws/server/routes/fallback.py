"""The HTTP fallback: protocol v1 sessions over plain HTTP requests.

For networks where WebSockets do not pass (some proxies) and for debugging
with curl. Each route carries one request frame and answers with its reply
frame; the session lives on the server between requests, addressed by its id:

====================================  ==========  ======================
route                                 request     reply (2xx)
====================================  ==========  ======================
``POST /v1/sessions``                 ``open``    ``opened`` (201)
``POST /v1/sessions/{id}/reset``      ``reset``   ``result``
``POST /v1/sessions/{id}/step``       ``step``    ``result``
``GET /v1/sessions/{id}/state``       ``state``   ``state``
``POST /v1/sessions/{id}/snapshot``   ``snapshot``  ``snapshot``
``POST /v1/sessions/{id}/restore``    ``restore``   ``result``
``DELETE /v1/sessions/{id}``          ``close``   ``closed``
====================================  ==========  ======================

Bodies are MessagePack (``Content-Type: application/msgpack``: the body is
the protocol frame itself, byte for byte) or the JSON view of the frame
(:mod:`openenv_ws.jsonview`; ``op`` and ``id`` may be left out). The reply
format follows ``Accept``, else the request's format, else JSON. Every
request is served by the same :class:`~openenv_ws.server.ServerSession` code
as a WebSocket message; errors are ``error`` frames with the protocol's codes
and the HTTP status of :data:`HTTP_STATUS`. Sessions idle for longer than the
TTL are closed by the process's idle expiry (:mod:`openenv_ws.server.session.expiry`).

A request equal to the session's previous one, with a non-zero id, is a
retry (the client lost the reply): it gets the same reply and is not applied
again (the session's :class:`~openenv_ws.server.session.replay.ReplayCache`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ...environment import EnvFactory
from ...errors import PayloadTooBig, ProtocolError
from ...jsonview import client_frame_from_json, frame_to_json
from ...protocol import (
    ERRORS,
    PROTOCOL_VERSION,
    ClientFrame,
    Error,
    Open,
    Opened,
    ServerFrame,
    SessionState,
    decode_client_frame,
    encode,
    error_frame,
)
from ..session.admission import SessionRegistry
from ..session.calls import call
from ..session.expiry import Expiry
from ..session.pacing import ColdOpens
from ..session.replay import ReplayCache
from ..session.replies import FrameReply
from ..session.server_session import ServerSession

__all__ = [
    "HTTP_STATUS",
    "JSON",
    "MSGPACK",
    "SESSIONS_PATH",
    "HTTPSessionStore",
    "http_routes",
    "http_status",
]

logger = logging.getLogger("openenv_ws.server")

#: Path of the HTTP fallback's session collection.
SESSIONS_PATH = "/v1/sessions"
MSGPACK = "application/msgpack"
JSON = "application/json"
_MSGPACK_TYPES = frozenset({MSGPACK, "application/x-msgpack", "application/vnd.msgpack"})

#: HTTP status of a reply carrying each protocol error code.
HTTP_STATUS: dict[str, int] = {
    "bad_frame": 400,
    "text_frame": 400,
    "too_big": 413,
    "unsupported_version": 400,
    "auth": 401,
    "capacity": 429,
    "idle_timeout": 404,
    "shutting_down": 503,
    "resume_failed": 404,
    "internal": 500,
    "step_timeout": 504,
    "bad_request": 400,
    "unknown_op": 400,
    "not_open": 404,
    "already_open": 409,
    "bad_config": 422,
    "not_reset": 409,
    "episode_over": 409,
    "invalid_action": 422,
    "unsupported": 501,
    "bad_snapshot": 422,
}


def http_status(code: str) -> int:
    """The HTTP status for an error code; codes a later revision adds map by their fatal flag."""
    status = HTTP_STATUS.get(code)
    if status is None:
        status = 500 if ERRORS.get(code, ERRORS["internal"]).fatal else 400
    return status


# A JSON body holds base64 (4/3 of the bytes) plus syntax: it may be twice the frame limit.
_JSON_BODY_FACTOR = 2
# How many recently expired session ids are remembered, to say "expired" rather than "unknown".
_TOMBSTONES = 4096


# --------------------------------------------------------------------------- the store


@dataclass(slots=True, eq=False)
class HTTPEntry:
    """One HTTP session: the sans-I/O session, the spec it opened with, its last use, and
    whether a request reached it after the one that opened it (``used``)."""

    session: ServerSession
    spec: dict[str, Any] = field(default_factory=dict)
    last_used: float = 0.0
    used: bool = False


class HTTPSessionStore:
    """The sessions opened over HTTP, in order of last use, with idle expiry.

    Args:
        env_factory: makes the environment of each session.
        registry: the process's sessions (shared with WebSocket sessions, so
            the session limit counts both) and its limits: the TTL
            (``http_session_ttl``: seconds without a request after which a
            session is closed; None: never), the shorter TTL of a session no
            request reached after the one that opened it (``http_unused_ttl``:
            opens nobody uses do not hold their slot for long), the frame
            size and the ``step_timeout`` of environments that are not inline.
        cold_opens: the turns of opens that build their environment (shared
            with the WebSocket sessions); None: opens are not paced.
        expiry: the process's idle expiry, which closes the sessions past the
            TTL; None: only :meth:`expire` does (and each :meth:`add`).
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(
        self,
        env_factory: EnvFactory,
        registry: SessionRegistry,
        *,
        cold_opens: ColdOpens | None = None,
        expiry: Expiry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        limits = registry.limits
        ttl = limits.http_session_ttl
        unused_ttl = limits.http_unused_ttl
        if ttl is not None and unused_ttl is not None:
            unused_ttl = min(ttl, unused_ttl)
        self.env_factory = env_factory
        self.registry = registry
        self.ttl = ttl
        self.unused_ttl = unused_ttl
        self.max_frame_size = limits.max_frame_size
        self.step_timeout = limits.step_timeout
        self.cold_opens = cold_opens
        self._clock = clock
        self._entries: OrderedDict[str, HTTPEntry] = OrderedDict()
        # The entries no request reached since their open, in order of opening.
        self._unused: OrderedDict[str, HTTPEntry] = OrderedDict()
        # Recently expired ids and the TTL they expired after.
        self._expired: OrderedDict[str, float] = OrderedDict()
        self._expiry = expiry
        self._key = ("http-sessions", id(self))
        self._wake_at = float("inf")  # when the expiry runs _check next (loop time)
        self.expired_total = 0

    def __len__(self) -> int:
        return len(self._entries)

    def new_session(self, peer: str | None = None) -> ServerSession:
        """A session not yet open nor stored (see :meth:`add`); any request may be a retry.
        `peer`: the client's address (counted against ``max_sessions_per_peer``)."""
        session = ServerSession(
            self.env_factory,
            max_frame_size=self.max_frame_size,
            admit=self.registry.admit,
            release=self.registry.release,
            abandoned=self.registry.abandoned,
            # A lost reply goes unnoticed here (the client retries): no delta frames.
            compression=self.registry.limits.compression,
            allow_delta=False,
            byte_counts=self.registry.observation_bytes,
            max_envs=self.registry.limits.max_envs,
        )
        session.replay = ReplayCache(sticky=True)
        session.peer = peer
        return session

    def add(self, session: ServerSession, spec: dict[str, Any]) -> HTTPEntry:
        """Keep an open session; it is found by its ``session_id`` from now on."""
        self.expire()
        entry = HTTPEntry(session, spec, self._clock())
        self._entries[session.session_id] = entry
        if self.unused_ttl is not None:
            self._unused[session.session_id] = entry
        expiry = self._expiry
        first = self._first_ttl()
        if expiry is not None and first is not None:
            when = asyncio.get_running_loop().time() + first
            # The sweep may be planned for the long TTL: then look again by the short one.
            if self._key not in expiry or when < self._wake_at:
                self._wake_at = when
                expiry.at(self._key, when, self._check)
        return entry

    def _first_ttl(self) -> float | None:
        """The shorter of the two TTLs (None: sessions never expire)."""
        ttls = [t for t in (self.ttl, self.unused_ttl) if t is not None]
        return min(ttls) if ttls else None

    def get(self, session_id: str) -> HTTPEntry | None:
        """The session with that id, marked as just used; None when unknown or expired."""
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.last_used = self._clock()
            self._entries.move_to_end(session_id)
            if not entry.used:
                entry.used = True
                self._unused.pop(session_id, None)
        return entry

    async def serve(
        self, session: ServerSession, frame: ClientFrame, peer: str | None = None
    ) -> FrameReply:
        """Serve a request frame of `session` as a WebSocket message would be: an open that
        builds its environment waits its turn (`peer`: the client's address), a call of an
        environment that is not inline runs on the session's worker thread under the
        ``step_timeout`` deadline. An open the session limits refuse anyway is refused
        before it waits or builds anything."""
        if session.env is None and type(frame) is Open:
            refused = session.open_refusal(frame) or self.registry.refusal(session)
            if refused is not None:
                return session.error(frame.id, *refused)
        if session.env is None and self.cold_opens is not None:
            return await self.cold_opens.serve(session, frame, peer)
        if session.inline or session.env is None:
            return session.serve(frame)
        return await call(session, frame, self.step_timeout)

    def missing(self, session_id: str) -> tuple[str, str]:
        """The error code and message for an id :meth:`get` did not find."""
        ttl = self._expired.get(session_id)
        if ttl is not None:
            return (
                "idle_timeout",
                f"session {session_id} expired after {ttl:g} s without a request; "
                f"open a new one with POST {SESSIONS_PATH}",
            )
        return (
            "not_open",
            f"session {session_id} is unknown or closed; open one with POST {SESSIONS_PATH}",
        )

    def drop(self, session_id: str) -> None:
        """Forget and close a session (closed by the client, or ended by a fatal error)."""
        entry = self._entries.pop(session_id, None)
        self._unused.pop(session_id, None)
        if entry is not None:
            entry.session.close()

    def expire(self, now: float | None = None) -> int:
        """Close the sessions idle for longer than the TTL, and those unused for longer
        than the unused TTL; returns how many.

        The entries are in order of last use (the unused ones in order of
        opening), so this looks at the expired ones and the first live one only.
        """
        now = self._clock() if now is None else now
        count = 0
        if self.unused_ttl is not None:
            count += self._sweep(self._unused, now - self.unused_ttl, self.unused_ttl)
        if self.ttl is not None:
            count += self._sweep(self._entries, now - self.ttl, self.ttl)
        if count:
            self.expired_total += count
        return count

    def _sweep(self, entries: OrderedDict[str, HTTPEntry], deadline: float, ttl: float) -> int:
        """Close the entries of `entries` (oldest first) last used before `deadline`."""
        count = 0
        while entries:
            session_id, entry = next(iter(entries.items()))
            if entry.last_used > deadline:
                break
            del entries[session_id]
            self._entries.pop(session_id, None)
            self._unused.pop(session_id, None)
            entry.session.close()
            self._expired[session_id] = ttl
            if len(self._expired) > _TOMBSTONES:
                self._expired.popitem(last=False)
            count += 1
        if count:
            unused = "" if ttl == self.ttl else " after their open (--http-unused-ttl)"
            logger.info("closed %d HTTP session(s) idle for more than %g s%s", count, ttl, unused)
        return count

    def _check(self, now: float) -> float | None:
        """The idle expiry's check: close what is past a TTL; when to look again."""
        self.expire()
        wait: float | None = None
        for entries, ttl in ((self._unused, self.unused_ttl), (self._entries, self.ttl)):
            oldest = next(iter(entries.values()), None)
            if oldest is None or ttl is None:
                continue
            # No sooner than a quarter of the TTL: expiries close together are done at once.
            due = max(oldest.last_used + ttl - self._clock(), min(max(ttl / 4, 0.01), 30.0))
            wait = due if wait is None else min(wait, due)
        if wait is None:
            return None  # added again with the next session
        self._wake_at = now + wait
        return self._wake_at

    async def aclose(self) -> None:
        """Close every session (server shutdown)."""
        if self._expiry is not None:
            self._expiry.cancel(self._key)
        self._unused.clear()
        while self._entries:
            _, entry = self._entries.popitem()
            entry.session.close()


# --------------------------------------------------------------------------- requests


def is_msgpack(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";", 1)[0].strip() in _MSGPACK_TYPES


def reply_type(request: Request, body_is_msgpack: bool | None) -> str:
    """``Accept`` first, then the request body's format, then JSON."""
    accept = request.headers.get("accept", "")
    if "msgpack" in accept:
        return MSGPACK
    if "json" in accept:
        return JSON
    return MSGPACK if body_is_msgpack else JSON


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with PayloadTooBig as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooBig(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooBig(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def error_response(code: str, message: str, media_type: str, rid: int | None = None) -> Response:
    """An ``error`` frame in the wanted format with the status of its code."""
    frame = error_frame(rid, code, message)
    content = encode(frame) if media_type == MSGPACK else frame_to_json(frame)
    headers = {"Retry-After": "1"} if code == "capacity" else None
    return Response(content, http_status(code), headers=headers, media_type=media_type)


def render(reply: ServerFrame, media_type: str) -> tuple[ServerFrame, bytes]:
    """The body of a reply frame; an ``error`` frame and its body instead if it cannot be
    encoded (a value of the environment the wire cannot carry)."""
    try:
        return reply, encode(reply) if media_type == MSGPACK else frame_to_json(reply)
    except ProtocolError as exc:
        error = error_frame(reply.id, exc.code, str(exc))
        return error, encode(error) if media_type == MSGPACK else frame_to_json(error)


def reply_response(reply: ServerFrame, media_type: str, ok_status: int = 200) -> Response:
    """A reply frame of a session as a response, with the status of its error code if any."""
    return response_of(*render(reply, media_type), media_type, ok_status)


def response_of(reply: ServerFrame, body: bytes, media_type: str, ok_status: int = 200) -> Response:
    """The response carrying `body`, the rendering of `reply` (see :func:`render`)."""
    if not isinstance(reply, Error):
        return Response(body, ok_status, media_type=media_type)
    headers = {"Retry-After": "1"} if reply.code == "capacity" else None
    return Response(body, http_status(reply.code), headers=headers, media_type=media_type)


async def read_frame(request: Request, op: str, max_frame_size: int) -> ClientFrame:
    """The request frame of a route (a MessagePack or JSON body).

    Raises:
        ProtocolError: the body is too large, malformed, or holds another op.
    """
    msgpack_body = is_msgpack(request.headers.get("content-type"))
    limit = max_frame_size if msgpack_body else max_frame_size * _JSON_BODY_FACTOR
    body = await read_body(request, limit)
    defaults: dict[str, Any] = {"op": op, "id": 0}
    if op == "open":
        defaults["version"] = PROTOCOL_VERSION
        defaults["structured"] = True  # for JSON: its reader takes any value (SPEC 13)
    if not body:
        # A route whose op has no required fields needs no body (GET state, DELETE).
        return client_frame_from_json(b"", defaults=defaults)
    if msgpack_body:
        frame = decode_client_frame(body, max_frame_size=max_frame_size)
    else:
        frame = client_frame_from_json(body, defaults=defaults)
    if op != frame.OP:
        raise ProtocolError(
            f"a '{frame.OP}' frame was sent to the '{op}' route; "
            f"send it to the route of its op (see {SESSIONS_PATH})",
            code="bad_request",
            request_id=frame.id,
        )
    return frame


# --------------------------------------------------------------------------- routes


class HTTPFallback:
    """The route handlers of the HTTP fallback over one :class:`HTTPSessionStore`."""

    def __init__(self, store: HTTPSessionStore) -> None:
        self.store = store

    async def open(self, request: Request) -> Response:
        store = self.store
        media = reply_type(request, is_msgpack(request.headers.get("content-type")))
        try:
            frame = await read_frame(request, "open", store.max_frame_size)
        except ProtocolError as exc:
            return error_response(exc.code, str(exc), media, exc.request_id)
        assert isinstance(frame, Open)
        peer = request.client.host if request.client is not None else None
        session = store.new_session(peer)
        reply, _ = await store.serve(session, frame, peer)
        if session.state is not SessionState.OPEN or not isinstance(reply, Opened):
            session.close()
            return reply_response(reply, media)
        store.add(session, reply.spec)
        response = reply_response(reply, media, 201)
        response.headers["Location"] = f"{SESSIONS_PATH}/{session.session_id}"
        return response

    def route(self, op: str) -> Callable[[Request], Any]:
        store = self.store

        async def handler(request: Request) -> Response:
            msgpack_body = is_msgpack(request.headers.get("content-type"))
            media = reply_type(request, msgpack_body)
            session_id: str = request.path_params["session_id"]
            try:
                frame = await read_frame(request, op, store.max_frame_size)
            except ProtocolError as exc:
                if ERRORS.get(exc.code, ERRORS["internal"]).fatal:
                    store.drop(session_id)
                return error_response(exc.code, str(exc), media, exc.request_id)
            # Looked up after the body is read: the sweeper may have run meanwhile.
            entry = store.get(session_id)
            if entry is None:
                code, message = store.missing(session_id)
                # As on a WebSocket, idle_timeout answers no request: its id is nil.
                rid = None if code == "idle_timeout" else frame.id
                return error_response(code, message, media, rid)
            reply, close = await store.serve(entry.session, frame)
            reply, body = render(reply, media)
            if close is not None or (isinstance(reply, Error) and reply.fatal):
                store.drop(session_id)
            return response_of(reply, body, media)

        handler.__name__ = f"http_{op}"
        return handler


def http_routes(store: HTTPSessionStore) -> list[BaseRoute]:
    """The HTTP fallback's routes (see the module docstring)."""
    fallback = HTTPFallback(store)
    item = SESSIONS_PATH + "/{session_id}"
    return [
        Route(SESSIONS_PATH, fallback.open, methods=["POST"]),
        Route(item + "/reset", fallback.route("reset"), methods=["POST"]),
        Route(item + "/step", fallback.route("step"), methods=["POST"]),
        Route(item + "/state", fallback.route("state"), methods=["GET", "POST"]),
        Route(item + "/snapshot", fallback.route("snapshot"), methods=["POST"]),
        Route(item + "/restore", fallback.route("restore"), methods=["POST"]),
        Route(item, fallback.route("close"), methods=["DELETE"]),
    ]
