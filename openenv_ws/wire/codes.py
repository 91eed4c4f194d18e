"""The stable error codes of protocol v1: what each means and whether it ends the session."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import OpenEnvError

__all__ = ["ERRORS", "ErrorInfo", "error_code_of"]


class ErrorInfo(NamedTuple):
    """What an error code means on the wire."""

    fatal: bool
    close_code: int | None
    meaning: str


#: Every stable error code: whether it ends the session and with which close code.
ERRORS: dict[str, ErrorInfo] = {
    "bad_frame": ErrorInfo(True, 1002, "the frame is not MessagePack or has no valid op/id"),
    "text_frame": ErrorInfo(True, 1003, "a text message was sent; frames are binary"),
    "too_big": ErrorInfo(True, 1009, "the frame is larger than the receiver's limit"),
    "unsupported_version": ErrorInfo(True, 1002, "the server does not speak that version"),
    "auth": ErrorInfo(True, 1008, "missing or wrong credentials"),
    "capacity": ErrorInfo(True, 1013, "the server hosts its maximum number of sessions"),
    "idle_timeout": ErrorInfo(True, 1001, "no request arrived within the idle timeout"),
    "shutting_down": ErrorInfo(True, 1001, "the server is draining and closes sessions"),
    "resume_failed": ErrorInfo(True, 1008, "the resume token is unknown or expired"),
    "internal": ErrorInfo(True, 1011, "the environment failed; the session is lost"),
    "step_timeout": ErrorInfo(True, 1011, "an environment call missed the server's deadline"),
    "bad_request": ErrorInfo(False, None, "a field is missing or has the wrong type"),
    "unknown_op": ErrorInfo(False, None, "the op is not one this server knows"),
    "not_open": ErrorInfo(False, None, "the op needs an open session; send open first"),
    "already_open": ErrorInfo(False, None, "open was sent twice on one connection"),
    "bad_config": ErrorInfo(False, None, "the environment configuration was refused"),
    "not_reset": ErrorInfo(False, None, "step/snapshot before the first reset"),
    "episode_over": ErrorInfo(False, None, "step after the episode ended; reset first"),
    "invalid_action": ErrorInfo(False, None, "the action is outside the action space"),
    "unsupported": ErrorInfo(False, None, "the environment does not support this op"),
    "bad_snapshot": ErrorInfo(False, None, "the environment cannot restore those snapshot bytes"),
}


def error_code_of(exc: BaseException) -> str:
    """The wire error code for an exception raised while serving a request."""
    if isinstance(exc, OpenEnvError) and exc.code in ERRORS:
        return exc.code
    return "internal"
