"""The connection guard's bookkeeping, socket-free (the hostile suite attacks a real server)."""

from __future__ import annotations

from typing import Any

import pytest

from openenv_ws.server.transport.guard import (
    ConnectionGuard,
    Phase,
    fit_to_fd_limit,
    websocket_share,
)


class Conn:
    """What the guard sees of a connection: its place in the books and an abort."""

    def __init__(self) -> None:
        self.peer: Any = None
        self.address = ""
        self.phase = Phase.HEAD
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def admit(guard: ConnectionGuard, address: str, *, pending: bool = True) -> tuple[Conn, str | None]:
    conn = Conn()
    refusal = guard.admit(conn, address)
    if refusal is None and pending:
        guard.pend(conn)
    return conn, refusal


def test_a_full_peer_sheds_its_oldest_unfinished_request_then_refuses() -> None:
    guard = ConnectionGuard(max_connections=10, max_per_peer=2)
    first, _ = admit(guard, "a")
    second, _ = admit(guard, "a", pending=False)  # its request is complete: not shed
    third, refusal = admit(guard, "a")
    assert refusal is None and first.aborted and not second.aborted
    assert guard.peers["a"].count == 2 and guard.connections == 2
    guard.unpend(third)
    _, refusal = admit(guard, "a")
    assert refusal is not None and "--max-connections-per-peer" in refusal
    _, other = admit(guard, "b")  # another address is not concerned
    assert other is None
    assert guard.counts["shed"] == 1 and guard.counts["refused"] == 0  # refusals: the protocol


def test_a_cap_of_one_keeps_its_books_when_it_sheds() -> None:
    guard = ConnectionGuard(max_connections=None, max_per_peer=1)
    conns = [admit(guard, "a")[0] for _ in range(5)]
    assert [c.aborted for c in conns] == [True] * 4 + [False]
    assert guard.peers["a"].count == 1 and guard.connections == 1
    guard.release(conns[-1])
    guard.release(conns[-1])  # idempotent
    assert guard.peers == {} and guard.connections == 0 and guard.pending == {}


def test_the_server_cap_sheds_across_peers_and_websockets_keep_a_reserve() -> None:
    guard = ConnectionGuard(max_connections=3, max_per_peer=None)
    a, _ = admit(guard, "a")
    b, _ = admit(guard, "b", pending=False)
    c, _ = admit(guard, "c", pending=False)
    _, refusal = admit(guard, "d")
    assert refusal is None and a.aborted  # the only unfinished one
    assert guard.upgrade_refusal(b) is None
    b.phase = Phase.UPGRADED
    assert guard.upgrade_refusal(c) is None
    c.phase = Phase.UPGRADED
    refusal = guard.upgrade_refusal(admit(guard, "e")[0])
    assert refusal is not None and "--max-connections," in refusal
    guard.release(b)
    assert guard.websockets == 1


@pytest.mark.parametrize(
    ("cap", "share"), [(1, 1), (2, 1), (8, 7), (40, 39), (1024, 992), (4096, 3968)]
)
def test_websocket_share(cap: int, share: int) -> None:
    assert websocket_share(cap) == share


def test_the_cap_fits_under_the_descriptor_limit() -> None:
    assert fit_to_fd_limit(4096, 1024) == 1024 - 64
    assert fit_to_fd_limit(4096, 1 << 20) == 4096
    with pytest.raises(ValueError, match="max_per_peer"):
        ConnectionGuard(max_per_peer=0)


@pytest.mark.parametrize(
    "limits",
    [{"max_connections": 0}, {"max_per_peer": 0}, {"max_head_size": 0}, {"handshake_timeout": 0}],
)
def test_a_limit_below_one_is_refused_by_name(limits: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(limits))):
        ConnectionGuard(**limits)
