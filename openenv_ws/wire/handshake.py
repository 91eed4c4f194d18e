"""The WebSocket opening handshake, client side (RFC 6455 section 4): the upgrade
request's bytes and the check of the server's answer. No I/O."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from ..errors import AuthError, ProtocolError, ServerUnavailable

__all__ = ["GUID", "accept_key", "check_handshake_answer", "handshake_request"]

#: The GUID RFC 6455 appends to the key before hashing it.
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key: str | bytes) -> str:
    """The ``Sec-WebSocket-Accept`` value that answers ``Sec-WebSocket-Key`` `key`."""
    raw = key.encode() if isinstance(key, str) else key
    return base64.b64encode(hashlib.sha1(raw + GUID).digest()).decode()


def handshake_request(netloc: str, target: str, headers: Mapping[str, str]) -> tuple[bytes, str]:
    """The HTTP upgrade request of a WebSocket handshake, and its ``Sec-WebSocket-Key``."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {netloc}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "User-Agent: openenv-ws",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), key


def check_handshake_answer(head: str, key: str, url: str) -> dict[str, str]:
    """The answer's headers (lower-case names) if it accepts the handshake, else raise why not.

    Raises:
        AuthError: HTTP 401 or 403 (missing or wrong token, a refused origin).
        ServerUnavailable: HTTP 404 (no WebSocket endpoint at the URL's path),
            or any other status than 101.
        ProtocolError: a wrong ``Sec-WebSocket-Accept`` or an extension not offered.
    """
    status_line, _, rest = head.partition("\r\n")
    fields = {}
    for line in rest.split("\r\n"):
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    parts = status_line.split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if status == 404:
        path = urlsplit(url).path or "/"
        raise ServerUnavailable(
            f"the server at {url} has no WebSocket endpoint at path {path!r} (HTTP 404); "
            "an openenv-ws server takes sessions at /ws (ws://host:port/ws)"
        )
    if status in (401, 403):
        raise AuthError(
            f"the server at {url} refused the connection (HTTP {status}); "
            "pass the server's token with token=... (or OPENENV_WS_TOKEN)"
        )
    if status != 101:
        raise ServerUnavailable(
            f"{url} did not accept a WebSocket (answered '{status_line}'); "
            "check the URL points at an openenv-ws server's /ws endpoint"
        )
    if fields.get("sec-websocket-accept") != accept_key(key):
        raise ProtocolError("the server's Sec-WebSocket-Accept does not match the handshake key")
    if fields.get("sec-websocket-extensions"):
        raise ProtocolError("the server enabled a WebSocket extension that was not offered")
    return fields
