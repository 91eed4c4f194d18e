"""Keep credentials, and clients' faults, out of the server's logs.

At debug level, ``websockets`` (under uvicorn too) logs every handshake
header, ``Authorization`` included. :func:`redact_credentials` puts a filter
on those loggers that blanks the value of credential headers before any
handler sees the record, and one that keeps a client's malformed message
from writing a server traceback.
"""

from __future__ import annotations

import logging
import re

__all__ = ["ClientFaultFilter", "CredentialFilter", "redact_credentials"]

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


_FILTER = CredentialFilter()
_CLIENT_FAULTS = ClientFaultFilter()


def redact_credentials(*names: str) -> None:
    """Install the filters on `names` (default: the handshake loggers). Idempotent."""
    for name in names or LOGGERS:
        logger = logging.getLogger(name)
        for f in (_FILTER, _CLIENT_FAULTS):
            if f not in logger.filters:
                logger.addFilter(f)
