"""SessionMachine follows the state table of SPEC.md section 7, cell by cell."""

from __future__ import annotations

import pytest

from openenv_ws.errors import InvalidState
from openenv_ws.protocol import ERRORS, SessionMachine, SessionState

from .spec_tables import parse_cell, state_table

OPS, TABLE = state_table()
CELLS = [(state, op) for state in TABLE for op in OPS]


def _machine_in(state: str) -> SessionMachine:
    """A machine driven into `state` through served ops, as a server would."""
    machine = SessionMachine()
    path = {
        "connected": [],
        "open": [("open", False)],
        "running": [("open", False), ("reset", False)],
        "ended": [("open", False), ("reset", False), ("step", True)],
        "closed": [("open", False), ("close", False)],
    }[state]
    for op, done in path:
        machine.check(op)
        machine.served(op, done=done)
    assert machine.state is SessionState(state)
    return machine


def test_table_covers_every_state_and_op() -> None:
    assert set(TABLE) == {s.value for s in SessionState}
    assert OPS == ["open", "reset", "step", "state", "snapshot", "restore", "close"]


@pytest.mark.parametrize("state, op", CELLS, ids=[f"{s}-{o}" for s, o in CELLS])
def test_cell(state: str, op: str) -> None:
    code, after, ends_if_done = parse_cell(TABLE[state][op])
    machine = _machine_in(state)
    if state == "closed":
        with pytest.raises(InvalidState, match=f"'{op}' on a closed session") as info:
            machine.check(op)
        assert info.value.code == "closed"
        return
    if code is not None:
        assert code in ERRORS and not ERRORS[code].fatal
        with pytest.raises(InvalidState) as info:
            machine.check(op)
        assert info.value.code == code
        assert f"session is {state}" in str(info.value)
        assert machine.state is SessionState(state), "a refusal leaves the state alone"
        return
    machine.check(op)
    machine.served(op)
    assert machine.state is SessionState(after)
    if ends_if_done:
        done_machine = _machine_in(state)
        done_machine.served(op, done=True)
        assert done_machine.state is SessionState.ENDED


def test_named_transitions() -> None:
    m = SessionMachine()
    with pytest.raises(InvalidState, match="send 'open'") as info:
        m.check("step")
    assert info.value.code == "not_open"
    m.served("open")
    with pytest.raises(InvalidState, match="reset") as info:
        m.check("step")
    assert info.value.code == "not_reset"
    with pytest.raises(InvalidState) as info:
        m.check("open")
    assert info.value.code == "already_open"
    m.served("reset")
    m.check("step")
    m.served("step", done=True)
    with pytest.raises(InvalidState, match="episode has ended") as info:
        m.check("step")
    assert info.value.code == "episode_over"
    m.check("reset")
    m.served("reset")
    assert m.state is SessionState.RUNNING
    m.closed()
    with pytest.raises(InvalidState) as info:
        m.check("reset")
    assert info.value.code == "closed"
