"""The resume procedure without a socket: the effects it asks for and what it makes of their outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from openenv_ws.client._core import ClientCore
from openenv_ws.client._resume import (
    Adopt,
    Connect,
    Discard,
    Effect,
    Exchange,
    Send,
    Sleep,
    resume,
    run,
)
from openenv_ws.errors import (
    ProtocolError,
    RemoteEnvError,
    RequestTimeout,
    ServerUnavailable,
    SessionClosed,
)
from openenv_ws.protocol import Error, Opened, Result, decode_client_frame

REQUEST = b"the step in flight"


@dataclass
class Settings:
    url: str = "ws://127.0.0.1:1/ws"
    open_timeout: float | None = 5.0
    resume_timeout: float = 30.0


def open_core() -> ClientCore:
    core = ClientCore({"game": "pong"}, token="t", max_frame_size=1 << 20)
    core.session_id, core.resume_token = "s1", "r1"
    return core


def opened(rid: int, session_id: str = "s1") -> Opened:
    return Opened(id=rid, session_id=session_id, spec={}, resume_token="r2")


class Script:
    """Performs effects from a list of outcomes (an exception is raised), recording them."""

    def __init__(self, core: ClientCore, *outcomes: Any) -> None:
        self.core = core
        self.outcomes = list(outcomes)
        self.effects: list[Effect] = []

    def __call__(self, effect: Effect) -> Any:
        self.effects.append(effect)
        if isinstance(effect, Exchange) and effect.data is not None:
            # The answer to the resuming open carries its id.
            frame = decode_client_frame(effect.data)
            assert frame.OP == "open" and frame.resume == "r1"  # type: ignore[union-attr]
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return opened(frame.id) if outcome == "opened" else outcome
        if isinstance(effect, (Connect, Exchange)):
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return None

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.effects]


def test_a_resume_reconnects_reopens_resends_and_returns_the_reply() -> None:
    core = open_core()
    reply = Result(7, None, 1.0, False, False, False, {})
    script = Script(core, "conn", "opened", reply)
    cause = SessionClosed(None, "cut")
    assert run(resume(core, Settings(), cause, REQUEST, 7, 2.0), script) is reply
    assert script.kinds() == ["Connect", "Exchange", "Send", "Adopt", "Exchange"]
    send, adopt, last = script.effects[2], script.effects[3], script.effects[4]
    assert isinstance(send, Send) and send.data == REQUEST and send.conn == "conn"
    assert isinstance(adopt, Adopt) and adopt.conn == "conn"
    assert isinstance(last, Exchange) and (last.data, last.rid, last.timeout) == (None, 7, 2.0)


def test_without_a_reply_to_wait_for_it_ends_once_the_connection_is_adopted() -> None:
    core = open_core()
    script = Script(core, "conn", "opened")
    cause = SessionClosed(1006, "cut")
    assert run(resume(core, Settings(), cause, None, None, None), script) is None
    assert script.kinds() == ["Connect", "Exchange", "Adopt"]


def test_failed_attempts_back_off_and_a_failed_open_discards_its_connection() -> None:
    core = open_core()
    script = Script(core, ServerUnavailable("down"), "c1", RequestTimeout("slow"), "c2", "opened")
    cause = SessionClosed(None, "cut")
    run(resume(core, Settings(), cause, None, None, None), script)
    kinds = script.kinds()
    assert kinds == [
        "Connect",
        "Sleep",
        "Connect",
        "Exchange",
        "Discard",
        "Sleep",
        "Connect",
        "Exchange",
        "Adopt",
    ]
    sleeps = [e.seconds for e in script.effects if isinstance(e, Sleep)]
    assert sleeps == [pytest.approx(0.05), pytest.approx(0.1)]
    discard = script.effects[4]
    assert isinstance(discard, Discard) and discard.conn == "c1"


def test_another_session_in_the_answer_gives_up() -> None:
    core = open_core()
    script = Script(core, "conn", opened(0, session_id="another"))
    with pytest.raises(SessionClosed, match="could not be resumed") as info:
        run(resume(core, Settings(), SessionClosed(None, "cut"), None, None, None), script)
    assert isinstance(info.value.__context__, ProtocolError)
    assert "another" in str(info.value.__context__)
    assert script.kinds() == ["Connect", "Exchange", "Discard"]


def test_a_refusal_of_the_session_gives_up_and_is_remembered() -> None:
    core = open_core()
    refusal = Error(id=None, code="resume_failed", message="no such session", fatal=True)
    script = Script(core, "conn", refusal)
    with pytest.raises(SessionClosed, match="could not be resumed") as info:
        run(resume(core, Settings(), SessionClosed(None, "cut"), None, None, None), script)
    assert core.closed_error is info.value
    assert isinstance(info.value.__context__, RemoteEnvError)


@pytest.mark.parametrize("resume_timeout, close_code", [(0.0, None), (30.0, 1000), (30.0, 1001)])
def test_a_final_close_or_resuming_off_raises_the_cause_without_any_effect(
    resume_timeout: float, close_code: int | None
) -> None:
    core = open_core()
    script = Script(core)
    cause = SessionClosed(close_code, "closed")
    with pytest.raises(SessionClosed) as info:
        run(resume(core, Settings(resume_timeout=resume_timeout), cause, None, None, None), script)
    assert info.value is cause and script.effects == []


def test_a_session_the_server_ended_raises_its_error() -> None:
    core = open_core()
    core.closed_error = SessionClosed(1001, "the server ended the session: idle")
    with pytest.raises(SessionClosed, match="idle"):
        run(resume(core, Settings(), SessionClosed(None, "cut"), None, None, None), Script(core))
