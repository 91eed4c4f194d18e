"""Optional bearer-token authentication, as an ASGI middleware.

With a token configured, every HTTP route and the WebSocket handshake need
``Authorization: Bearer <token>``; a wrong header is refused with HTTP 401
before anything else runs, so routes added to the app later are covered
without further work. ``GET /health`` stays public: liveness probes (Docker
``HEALTHCHECK``, Kubernetes, the local server provider) carry no secrets, and
the answer holds only counters, never a session id or a token. The web page's
static files (``/``, ``/web/...``) are public too: a browser cannot send the
header when loading a page, the files hold no secrets, and the page's own
session carries the token in its ``open`` frame.

A WebSocket handshake *without* an ``Authorization`` header is let through
(browsers cannot set that header on a WebSocket); such a connection must then
carry the token in its ``open`` frame, or ``open`` is refused with the fatal
error ``auth`` and close code 1008.

Tokens are compared with :func:`hmac.compare_digest` and never logged.

Independently of tokens, :class:`OriginCheck` keeps pages of other sites out:
a browser lets any page open a WebSocket to, or send a form-like POST to, any
address (127.0.0.1 included), and marks such requests with an ``Origin``
header. A WebSocket handshake, or an HTTP request that can change something
(any method but GET, HEAD and OPTIONS), whose ``Origin`` is neither the
server's own (same scheme, host and port as the request) nor an allowed one
is refused with HTTP 403. Clients that are not browsers send no ``Origin``
and are not affected.

:class:`HostCheck` keeps out *DNS rebinding*: a page of ``evil.example`` whose
name the attacker then points at 127.0.0.1 reaches a local server as its own
origin (``Host`` and ``Origin`` both ``evil.example``), which the origin
check cannot tell apart. Every request (WebSocket handshakes and every HTTP
route, ``/health`` included) must therefore name the server by a host it
answers to: ``localhost``, any IP address (a page cannot rebind a literal
address), or a name it was told to allow (``--allow-host``, ``*`` for any);
others get HTTP 403. Liveness probes name an address (Kubernetes sends the
pod's IP) or ``localhost`` and pass. ``openenv-ws serve`` bound to a wildcard
address (``0.0.0.0``, ``::``) accepts any host unless ``--allow-host`` is
given, since it cannot know the names it is reached by, and logs a warning.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ..._hosts import is_loopback
from .asgi import ASGIApp, Receive, Scope, Send

__all__ = [
    "AUTHENTICATED",
    "PUBLIC_PATHS",
    "PUBLIC_PREFIXES",
    "TOKEN_ENV",
    "HostCheck",
    "OriginCheck",
    "TokenAuth",
    "exposure_warning",
    "host_name",
    "is_wildcard",
    "served_hosts",
    "token_matches",
]

#: Environment variable a server (``openenv-ws serve``) and the clients read the token from.
TOKEN_ENV = "OPENENV_WS_TOKEN"
#: Scope key set to True when the request carried the right token in its header.
AUTHENTICATED = "openenv_ws.authenticated"
#: HTTP paths answered without a token (liveness probes, the web page).
PUBLIC_PATHS = frozenset({"/health", "/", "/web", "/web/"})
#: HTTP path prefixes answered without a token (the web page's static files).
PUBLIC_PREFIXES = ("/web/",)

_PREFIX = b"bearer "
#: HTTP methods that only read: a foreign page's request with them is let through
#: (without CORS headers its script cannot read the answer anyway).
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

logger = logging.getLogger("openenv_ws.server")


def token_matches(expected: str, given: str | bytes | None) -> bool:
    """Whether `given` is `expected`, in time independent of where they differ."""
    if given is None:
        return False
    if isinstance(given, str):
        given = given.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(expected.encode("utf-8"), given)


def is_wildcard(host: str) -> bool:
    """Whether binding `host` listens on every address of the machine."""
    try:
        return host == "" or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name in a ``Host`` header (or a ``--allow-host`` value): no port, no brackets,
    lower case, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        inside, bracket, rest = host[1:].partition("]")
        # Only a port may follow the address; anything else is no address at all.
        return inside if bracket and (rest == "" or rest[:1] == ":") else host
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def served_hosts(bind: str, allowed: Iterable[str]) -> tuple[list[str], str | None]:
    """The host names a server bound to `bind` answers to (for :class:`HostCheck`), and
    a warning to log, if any.

    A server bound to a name answers to it too. Bound to a wildcard address
    with no `allowed` names, it answers to any (it cannot know the names it
    is reached by), and the warning says how to restrict that.
    """
    names = list(allowed)
    if names or not is_wildcard(bind):
        if bind and not is_wildcard(bind) and not _is_address(host_name(bind)):
            names.append(bind)
        return names, None
    return ["*"], (
        f"bound to a wildcard address ({bind or '*'}): requests naming any host are served, "
        "so a web page can reach this server through DNS rebinding; pass --allow-host NAME "
        "(repeatable) with the names clients use to reach it"
    )


def exposure_warning(host: str, token: str | None) -> str | None:
    """The warning to log when a server binds a reachable address without a token."""
    if token or is_loopback(host):
        return None
    return (
        f"serving on a non-loopback address ({host}) without authentication; anyone who "
        f"can reach it can run environments: set {TOKEN_ENV} (or --token)"
    )


def scope_header(scope: Scope, name: bytes) -> bytes | None:
    """The value of request header `name` (lower-case) in an ASGI scope, or None."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class TokenAuth:
    """ASGI middleware refusing HTTP and WebSocket requests without the bearer token.

    Args:
        app: the ASGI app to protect.
        token: the shared secret clients send as ``Authorization: Bearer <token>``.
        public: HTTP paths served without a token.
    """

    def __init__(self, app: ASGIApp, *, token: str, public: Iterable[str] = PUBLIC_PATHS) -> None:
        if not token:
            raise ValueError("the token must be a non-empty string")
        self.app = app
        self._token = token.encode("utf-8")
        self._public = frozenset(public)

    def __repr__(self) -> str:  # the token stays out of reprs, hence out of tracebacks
        return f"TokenAuth(app={self.app!r}, token=<hidden>)"

    def _verdict(self, scope: Scope) -> bool | None:
        """True: right token; False: wrong or malformed header; None: no header."""
        header = scope_header(scope, b"authorization")
        if header is None:
            return None
        if header[: len(_PREFIX)].lower() != _PREFIX:
            return False
        return hmac.compare_digest(self._token, header[len(_PREFIX) :].strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            verdict = self._verdict(scope)
            path = scope["path"]
            if verdict or path in self._public or path.startswith(PUBLIC_PREFIXES):
                scope[AUTHENTICATED] = bool(verdict)
                await self.app(scope, receive, send)
                return
            await _refuse_http(send)
            return
        if kind == "websocket":
            verdict = self._verdict(scope)
            if verdict is False:
                await _refuse_websocket(scope, receive, send)
                return
            # No header: the session's ``open`` frame must carry the token.
            scope[AUTHENTICATED] = verdict is True
        await self.app(scope, receive, send)


class OriginCheck:
    """ASGI middleware refusing browser requests from other sites' pages (HTTP 403).

    Args:
        app: the ASGI app to protect.
        allowed: origins (``scheme://host[:port]``, case and a trailing slash
            ignored, or ``*``) whose pages are let in besides the server's own.
    """

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str] = ()) -> None:
        self.app = app
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed)

    def allows(self, origin: str, host: str | None, scheme: str = "http") -> bool:
        """True for the server's own origin (the request's `scheme` and ``Host``)
        and the allowed ones."""
        origin = origin.rstrip("/").lower()
        if origin in self._allowed or "*" in self._allowed:
            return True
        if host is None:
            return False
        parts = urlsplit(origin)
        return parts.scheme == _PAGE_SCHEMES.get(scheme, scheme) and parts.netloc == host.lower()

    def _refused(self, scope: Scope) -> str | None:
        origin = scope_header(scope, b"origin")
        if origin is None:
            return None
        host = scope_header(scope, b"host")
        text = origin.decode("latin-1")
        scheme = scope.get("scheme", "http")
        if self.allows(text, None if host is None else host.decode("latin-1"), scheme):
            return None
        return text

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            origin = self._refused(scope)
            if origin is not None:
                logger.warning("WebSocket from origin %r refused (see --allow-origin)", origin)
                message = await receive()  # websocket.connect
                if message["type"] == "websocket.connect":
                    await send({"type": "websocket.close", "code": 1008})  # HTTP 403
                return
        elif kind == "http" and scope["method"] not in _SAFE_METHODS:
            origin = self._refused(scope)
            if origin is not None:
                logger.warning(
                    "%s %s from origin %r refused (see --allow-origin)",
                    scope["method"],
                    scope["path"],
                    origin,
                )
                body = json.dumps(
                    {
                        "error": "origin",
                        "message": f"requests from pages of {origin} are not accepted here; "
                        "start the server with --allow-origin to let them in",
                    }
                ).encode()
                await _send_http(send, 403, _json_head(body), body)
                return
        await self.app(scope, receive, send)


class HostCheck:
    """ASGI middleware refusing requests that name a host the server does not answer to (403).

    Args:
        app: the ASGI app to protect.
        allowed: host names (a port is ignored) accepted besides ``localhost``
            and IP addresses; ``*`` accepts any.
    """

    def __init__(self, app: ASGIApp, *, allowed: Iterable[str] = ()) -> None:
        self.app = app
        names = {host_name(h) for h in allowed}
        self._any = "*" in names
        self._names = frozenset(names | {"localhost"})

    def allows(self, host: str) -> bool:
        """Whether a request with ``Host: <host>`` is served."""
        if self._any:
            return True
        name = host_name(host)
        return name in self._names or _is_address(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket") and not self._any:
            header = scope_header(scope, b"host")
            # No Host at all: not a browser (they always send one), nothing to rebind.
            if header is not None and not self.allows(header.decode("latin-1")):
                name = host_name(header.decode("latin-1"))[:100]
                logger.warning("request for host %r refused (see --allow-host)", name)
                body = json.dumps(
                    {
                        "error": "host",
                        "message": f"this server does not answer to the host name {name!r} "
                        "(a web page may be trying to reach it by DNS rebinding); if clients "
                        f"reach it by that name, start it with --allow-host {name}",
                    }
                ).encode()
                if kind == "http":
                    await _send_http(send, 403, _json_head(body), body)
                else:
                    await _refuse_websocket(scope, receive, send, 403, _json_head(body), body)
                return
        await self.app(scope, receive, send)


#: The scheme of a page (its ``Origin``) served over each request scheme.
_PAGE_SCHEMES = {"ws": "http", "wss": "https"}

_MESSAGE = (
    "missing or wrong bearer token; send 'Authorization: Bearer <token>' "
    "(clients: token=... or the OPENENV_WS_TOKEN environment variable)"
)


def _http_head(status: int) -> dict[str, Any]:
    body = json.dumps({"error": "auth", "message": _MESSAGE}).encode()
    return {
        "status": status,
        "headers": _json_head(body, (b"www-authenticate", b'Bearer realm="openenv-ws"')),
        "body": body,
    }


def _json_head(body: bytes, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]


async def _send_http(send: Send, status: int, headers: list[Any], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse_http(send: Send) -> None:
    head = _http_head(401)
    await _send_http(send, 401, head["headers"], head["body"])


async def _refuse_websocket(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int = 401,
    headers: list[Any] | None = None,
    body: bytes | None = None,
) -> None:
    """Refuse a WebSocket handshake with an HTTP answer (the 401 of a wrong token by default)."""
    message = await receive()  # websocket.connect
    if message["type"] != "websocket.connect":
        return
    if headers is None or body is None:
        head = _http_head(status)
        headers, body = head["headers"], head["body"]
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:  # the server cannot send a response body: a bare refusal (HTTP 403)
        await send({"type": "websocket.close", "code": 1008})
