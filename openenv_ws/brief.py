"""Short reprs of peer-sent values, for error messages."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from typing import Any

__all__ = ["BRIEF_CHARS", "brief", "brief_keys"]

#: Longest text :func:`brief` returns for one value, before its size note.
BRIEF_CHARS = 100

_BRIEF = reprlib.Repr()
_BRIEF.maxstring = 60
_BRIEF.maxother = 60
_BRIEF.maxlong = 40
_BRIEF.maxlevel = 2
_BRIEF.maxlist = _BRIEF.maxtuple = _BRIEF.maxdict = _BRIEF.maxset = 6


def brief(value: Any) -> str:
    """A short repr of `value` for error messages: at most about 100 characters.

    Error messages echo what a peer sent (an action, a config value); echoed
    whole, a 1 MiB value would make a reply of megabytes. Long strings and
    bytes keep their start and say their length, containers their first items
    and their size; nothing is rendered in full before being cut.
    """
    if isinstance(value, str | bytes | bytearray):
        if len(value) <= BRIEF_CHARS - 20:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[: BRIEF_CHARS - 40]!r}... ({len(value)} {unit})"
    text = _BRIEF.repr(value)
    if len(text) > BRIEF_CHARS:
        text = text[:BRIEF_CHARS] + "..."
    if "..." in text and isinstance(value, list | tuple | dict | set | frozenset):
        text += f" ({len(value)} items)"
    return text


def brief_keys(keys: Iterable[Any], *, most: int = 6) -> str:
    """Up to `most` keys (each :func:`brief`), comma-separated, then how many more there are."""
    keys = list(keys)
    shown = ", ".join(brief(k) for k in keys[:most])
    return shown if len(keys) <= most else f"{shown} and {len(keys) - most} more"
