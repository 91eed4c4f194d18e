"""Keep credentials out of logs.

At debug level, ``websockets`` (under uvicorn too) logs every handshake
header, ``Authorization`` included. :func:`redact_credentials` puts a filter
on those loggers that blanks the value of credential headers before any
handler sees the record.
"""

from __future__ import annotations

import logging
import re

__all__ = ["CredentialFilter", "redact_credentials"]

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


_FILTER = CredentialFilter()


def redact_credentials(*names: str) -> None:
    """Install the filter on `names` (default: the handshake loggers). Idempotent."""
    for name in names or LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
