"""Keep credentials, and clients' faults, out of the server's logs.

At debug level, ``websockets`` (under uvicorn too) logs every handshake
header, ``Authorization`` included. :func:`redact_credentials` puts a filter
on those loggers that blanks the value of credential headers before any
handler sees the record, and one that keeps a client's malformed message
from writing a server traceback. :class:`ClientTextFilter` escapes line
breaks and other control characters in what the server's own loggers write,
so that text a client chose (a config key, an exception message quoting one)
never forges a log line.
"""

from __future__ import annotations

import logging
import re
import traceback

__all__ = [
    "ClientFaultFilter",
    "ClientTextFilter",
    "CredentialFilter",
    "escape_controls",
    "redact_credentials",
]

_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization|cookie|set-cookie)(\s*[:=]\s*)([^\r\n]*)")
#: Loggers that write handshake headers at debug level.
LOGGERS = ("uvicorn.error", "websockets.client", "websockets.server", "websockets")


class CredentialFilter(logging.Filter):
    """Replace credential header values in a record's message with ``<redacted>``."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is not ours to fix
            return True
        if _HEADER.search(message):
            record.msg = _HEADER.sub(r"\1\2<redacted>", message)
            record.args = None
        return True


class ClientFaultFilter(logging.Filter):
    """Log a client's malformed text message in one line, without a server traceback.

    uvicorn logs an invalid UTF-8 text message with the stack of its own
    decoding; the fault is the client's, and a client sending many would
    fill the server's log with tracebacks.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Invalid UTF-8 sequence"):
            record.exc_info = None
            record.exc_text = None
        return True


_CONTROLS = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
#: Loggers of the server whose records may quote what a client sent.
SERVER_LOGGERS = (
    "openenv_ws.server",
    "openenv_ws.server.pool",
    "openenv_ws.server.workers",
    "openenv_ws.cli",
    "atari",
)


def escape_controls(text: str) -> str:
    """`text` with line breaks and other control characters written as escapes."""
    return _CONTROLS.sub(lambda m: repr(m.group())[1:-1], text)


class ClientTextFilter(logging.Filter):
    """Escape control characters in a record's message and its exception's message.

    The traceback's own lines are kept; only the text after it (the
    exception's message, which may quote a client's input) is escaped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is not ours to fix
            return True
        safe = escape_controls(message)
        if safe != message:
            record.msg, record.args = safe, None
        info = record.exc_info
        if info and info[1] is not None and not record.exc_text:
            exc = info[1]
            text = escape_controls(str(exc))
            lines = traceback.format_tb(info[2]) if info[2] is not None else []
            record.exc_text = (
                "Traceback (most recent call last):\n"
                + "".join(lines)
                + f"{type(exc).__module__}.{type(exc).__qualname__}: {text}"
            )
        return True


_FILTER = CredentialFilter()
_CLIENT_TEXT = ClientTextFilter()
_CLIENT_FAULTS = ClientFaultFilter()


def redact_credentials(*names: str) -> None:
    """Install the filters on `names` (default: the handshake loggers). Idempotent."""
    for name in names or LOGGERS:
        logger = logging.getLogger(name)
        for f in (_FILTER, _CLIENT_FAULTS):
            if f not in logger.filters:
                logger.addFilter(f)
    if not names:
        for name in SERVER_LOGGERS:
            logger = logging.getLogger(name)
            if _CLIENT_TEXT not in logger.filters:
                logger.addFilter(_CLIENT_TEXT)
