"""The one exception tree of openenv-ws.

Every error the runtime raises on purpose derives from :class:`OpenEnvError`::

    OpenEnvError
    ├── ProtocolError            bytes that are not a valid protocol v1 frame
    │   └── PayloadTooBig        a frame above the size limit (checked before decoding)
    ├── InvalidState             an op that the session's state does not allow
    │                            (step before reset, use after close, second open)
    ├── EnvConfigError           an environment configuration the server refuses
    ├── InvalidAction            an action outside the session's action space
    ├── BadSnapshot              snapshot bytes the environment cannot restore
    ├── RemoteEnvError           the server answered with an ``error`` frame
    │                            (carries the server's code, message and fatal flag)
    ├── SessionClosed            the session's socket is closed (close code, reason)
    ├── ServerUnavailable        no server could be reached or started
    ├── TLSError                 the TLS handshake failed (certificate not trusted,
    │                            wrong host name, expired; a peer not speaking TLS)
    ├── RequestTimeout           a reply did not arrive in time (also a TimeoutError)
    └── AuthError                the server refused the credentials

Errors that travel on the wire carry a stable string ``code`` (see
``protocol/SPEC.md``); :func:`openenv_ws.protocol.error_code_of` maps any
exception to the code the server sends for it.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "BadSnapshot",
    "EnvConfigError",
    "InvalidAction",
    "InvalidState",
    "OpenEnvError",
    "PayloadTooBig",
    "ProtocolError",
    "RemoteEnvError",
    "RequestTimeout",
    "ServerUnavailable",
    "SessionClosed",
    "TLSError",
]


class OpenEnvError(Exception):
    """Root of every error raised by openenv-ws on purpose."""

    #: The protocol error code a server sends when this error ends a request.
    code: str = "internal"


class ProtocolError(OpenEnvError):
    """Bytes or a frame that do not follow protocol v1.

    ``code`` is ``bad_frame`` when the envelope itself is unreadable,
    ``unknown_op`` for an op the receiver does not know, ``bad_request`` when
    a readable request has a bad field, and ``too_big`` for
    :class:`PayloadTooBig`. ``request_id`` is the frame's ``id`` when it could
    be read (so the error reply can echo it), else None.
    """

    code = "bad_frame"
    request_id: int | None = None

    def __init__(
        self, message: str, *, code: str = "bad_frame", request_id: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


class PayloadTooBig(ProtocolError):
    """A frame larger than the configured limit; refused before it is decoded."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"frame of {size} bytes is above the limit of {limit} bytes; "
            "raise max_frame_size on both ends if such frames are expected",
            code="too_big",
        )
        self.size = size
        self.limit = limit


class InvalidState(OpenEnvError):
    """An operation that the session's current state does not allow."""

    code = "invalid_state"

    def __init__(self, message: str, *, code: str = "invalid_state") -> None:
        super().__init__(message)
        self.code = code


class EnvConfigError(OpenEnvError, ValueError):
    """An environment configuration that cannot be served (unknown game, bad option)."""

    code = "bad_config"


class InvalidAction(OpenEnvError, ValueError):
    """An action outside the session's action space."""

    code = "invalid_action"


class BadSnapshot(OpenEnvError, ValueError):
    """Snapshot bytes that the environment refuses (damaged, foreign, another game)."""

    code = "bad_snapshot"


class RemoteEnvError(OpenEnvError):
    """The server answered a request with an ``error`` frame.

    Attributes:
        code: the server's stable error code (e.g. ``invalid_action``).
        message: the server's sentence about what went wrong.
        fatal: True when the server closes the session after this error.
        request_id: the id of the request that failed, if known.
    """

    def __init__(
        self, code: str, message: str, *, fatal: bool = False, request_id: int | None = None
    ) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.fatal = fatal
        self.request_id = request_id


class SessionClosed(OpenEnvError):
    """The session is closed; no further request can be served on it.

    Attributes:
        close_code: the WebSocket close code (1000 normal, 1001 going away,
            1008 policy, 1009 too big, 1011 internal, 1013 at capacity, ...),
            or None when the connection dropped without a close frame.
        reason: the close reason the server gave, or a description of the drop.
    """

    code = "closed"

    def __init__(self, close_code: int | None, reason: str) -> None:
        shown = "no close frame" if close_code is None else f"close code {close_code}"
        super().__init__(f"session closed ({shown}): {reason or 'no reason given'}")
        self.close_code = close_code
        self.reason = reason


class ServerUnavailable(OpenEnvError, ConnectionError):
    """No server could be reached (or started) at the given address."""

    code = "unavailable"


class TLSError(OpenEnvError, ConnectionError):
    """A secure connection could not be made: the server's certificate failed
    verification (the message names the problem and the URL), or one side
    speaks TLS and the other does not. Not transient: clients do not retry it.
    """

    code = "unavailable"


class RequestTimeout(OpenEnvError, TimeoutError):
    """A reply did not arrive within the request timeout."""

    code = "timeout"


class AuthError(OpenEnvError):
    """The server refused the credentials (missing or wrong bearer token)."""

    code = "auth"
