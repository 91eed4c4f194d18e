"""Resume tokens and parked sessions.

When a connection drops without the session being closed, the session is
*parked*: its environment stays as it is for a grace period, waiting for the
client to come back on a new connection with the ``resume_token`` it got in
``opened``. After the grace period (a check of the process's
:class:`~openenv_ws.server.session.expiry.Expiry`) it is closed and its slot freed.

A token is ``<session_id>.<secret>``: the session id finds the session, the
secret (192 random bits) proves the caller is its client; it is compared in
constant time. The token stays the same for the session's life.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from .expiry import Expiry

__all__ = ["ResumeStore"]


class _Resumable(Protocol):
    session_id: str


S = TypeVar("S", bound=_Resumable)


class ResumeStore(Generic[S]):
    """The resumable sessions of one server process and their grace timers.

    Args:
        grace: seconds a parked session waits for its client.
        expire: called with a parked session whose grace period ran out.
        expiry: the process's idle expiry (a new one if None).
    """

    def __init__(
        self, grace: float, expire: Callable[[S], None], expiry: Expiry | None = None
    ) -> None:
        self.grace = grace
        self._expire = expire
        self._expiry = expiry if expiry is not None else Expiry()
        self._secrets: dict[str, bytes] = {}
        self._sessions: dict[str, S] = {}
        self._parked: set[str] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def parked(self) -> int:
        """How many sessions wait for their client now."""
        return len(self._parked)

    def mint(self, session: S) -> str:
        """Register `session` as resumable and return its token."""
        secret = secrets.token_urlsafe(24)
        self._secrets[session.session_id] = secret.encode()
        self._sessions[session.session_id] = session
        return f"{session.session_id}.{secret}"

    def claim(self, token: str) -> S | None:
        """The session `token` resumes (its grace timer stopped), or None."""
        sid, _, secret = token.partition(".")
        expected = self._secrets.get(sid)
        if expected is None or not hmac.compare_digest(
            expected, secret.encode("utf-8", "surrogateescape")
        ):
            return None
        self._unpark(sid)
        return self._sessions[sid]

    def park(self, session: S) -> None:
        """Keep `session` for the grace period, then hand it to ``expire``."""
        sid = session.session_id
        self._parked.add(sid)
        self._expiry.after(("parked", sid), self.grace, lambda now: self._timeout(sid))

    def is_parked(self, session: S) -> bool:
        return session.session_id in self._parked

    def forget(self, session: S) -> None:
        """`session` is gone for good: its token no longer resumes anything."""
        sid = session.session_id
        self._secrets.pop(sid, None)
        self._sessions.pop(sid, None)
        self._unpark(sid)

    def parked_sessions(self) -> list[S]:
        return [self._sessions[sid] for sid in self._parked]

    def _unpark(self, sid: str) -> None:
        if sid in self._parked:
            self._parked.discard(sid)
            self._expiry.cancel(("parked", sid))

    def _timeout(self, sid: str) -> None:
        self._parked.discard(sid)
        session = self._sessions.get(sid)
        if session is not None:
            self._expire(session)
