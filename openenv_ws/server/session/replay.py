"""The replay cache of a session: a request sent again gets its reply again, not applied twice.

A client that lost a reply (its connection dropped and it resumed the
session, or an HTTP response never arrived) sends the same request again.
The session keeps its last request and the reply it got; a request equal to
it is answered with that reply, so a step is applied at most once whatever
the moment of the loss.

Requests are kept as they came: the bytes of a WebSocket message, or the
frame object of an HTTP or OpenEnv request. Two frames are the same request
when they have the same op, the same non-zero id and the same encoding (a
request without an id, e.g. from curl, is never a retry).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...protocol import encode

__all__ = ["ReplayCache"]


class ReplayCache:
    """The last request of a session and its reply.

    Args:
        sticky: every request may be a retry (HTTP). Otherwise only the one
            after :meth:`arm` is compared (the first request on a resumed
            WebSocket connection).
        on_hit: called each time a reply is replayed (a metric).
    """

    __slots__ = ("armed", "on_hit", "reply", "request", "sticky")

    def __init__(self, *, sticky: bool = False, on_hit: Callable[[], None] | None = None) -> None:
        self.sticky = sticky
        self.on_hit = on_hit
        self.armed = sticky
        self.request: Any = None
        self.reply: Any = None

    def arm(self) -> None:
        """The next request may be a re-send of the last one."""
        self.armed = True

    def recall(self, request: Any) -> Any:
        """The reply stored for `request` if it repeats the last request, else None.

        Disarms a cache that is not sticky: one request is compared, whichever.
        """
        self.armed = self.sticky
        last = self.request
        if last is None or type(last) is not type(request):
            return None
        if type(request) is bytes:
            same = last == request
        elif not request.id or last.id != request.id or last.OP != request.OP:
            same = False
        else:
            try:
                same = encode(last) == encode(request)
            except Exception:  # noqa: BLE001 - a request that cannot be encoded repeats nothing
                same = False
        if not same:
            return None
        if self.on_hit is not None:
            self.on_hit()
        return self.reply

    def keep(self, request: Any, reply: Any) -> None:
        """Remember `request` and its `reply` (replacing the previous pair)."""
        self.request = request
        self.reply = reply
