"""Socket-free checks of short error echoes, environments served off the loop, and cold-open turns."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws.brief import brief, brief_keys
from openenv_ws.environment import Environment, EnvResult, EnvSpec
from openenv_ws.protocol import (
    MAX_ERROR_MESSAGE,
    Open,
    Reset,
    Step,
    decode_server_frame,
    encode,
    error_frame,
)
from openenv_ws.server.session.calls import call
from openenv_ws.server.session.pacing import ColdOpens
from openenv_ws.server.session.server_session import ServerSession
from openenv_ws.testing import FakeEnvironment

from ..conftest import UNIT


@pytest.mark.parametrize(
    "value",
    [
        "x" * 1_000_000,
        b"x" * 1_000_000,
        list(range(1_000_000)),
        {f"k{i}": "v" * 1000 for i in range(1000)},
        [[[["deep" * 1000]]]],
        np.zeros(1_000_000),
        2**4000,
    ],
    ids=["str", "bytes", "list", "dict", "nested", "array", "int"],
)
def test_brief_is_short_whatever_the_value(value: Any) -> None:
    text = brief(value)
    assert len(text) < 160, text
    if isinstance(value, str | bytes | list | dict):
        assert f"{len(value)}" in text  # says how big it was


def test_brief_leaves_short_values_as_repr() -> None:
    for value in ("pong", 3, 2.5, [1, 2], {"a": 1}, None, b"ab"):
        assert brief(value) == repr(value)
    assert brief_keys(["a", "b"]) == "'a', 'b'"
    assert brief_keys([f"k{i}" for i in range(100)]).endswith("and 94 more")


def test_error_messages_are_cut() -> None:
    frame = error_frame(1, "internal", "x" * 100_000)
    assert len(frame.message) <= MAX_ERROR_MESSAGE
    assert "100000 characters" in frame.message
    assert error_frame(1, "internal", "short").message == "short"


class _Gate(FakeEnvironment):
    """A fake environment whose steps wait for a gate (not inline)."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.inline = False
        self.gate = threading.Event()
        self.closed = threading.Event()

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        if not self.gate.wait(30 * UNIT):
            raise RuntimeError("the gate never opened")
        return super().step(action, obs=obs)

    def close(self) -> None:
        self.closed.set()


class _Factory:
    def __init__(self) -> None:
        self.envs: list[_Gate] = []
        self.given_back: list[Environment] = []

    def __call__(self, config: dict[str, Any]) -> Environment:
        env = _Gate(config)
        self.envs.append(env)
        return env

    def give_back(self, config: Mapping[str, Any], env: Environment) -> None:
        self.given_back.append(env)


def _opened(factory: _Factory) -> ServerSession:
    session = ServerSession(factory, max_frame_size=1 << 20)
    session.handle(encode(Open(id=1)))
    session.handle(encode(Reset(id=2, seed=0)))
    assert not session.inline
    return session


def test_requests_of_a_session_off_the_loop_are_served_in_order() -> None:
    factory = _Factory()
    session = _opened(factory)

    async def main() -> list[Any]:
        factory.envs[0].gate.set()
        calls = [call(session, encode(Step(id=i, action=i % 4)), 10 * UNIT) for i in (3, 4, 5)]
        return await asyncio.gather(*calls)

    replies = asyncio.run(main())
    frames = [decode_server_frame(reply) for reply, close in replies]
    assert [f.id for f in frames] == [3, 4, 5]
    assert [f.info["step"] for f in frames] == [1, 2, 3]
    session.close()
    assert factory.given_back == factory.envs  # a healthy environment goes back to the pool


def test_a_call_past_the_deadline_abandons_the_environment() -> None:
    factory = _Factory()
    session = _opened(factory)
    env = factory.envs[0]

    async def main() -> tuple[bytes, Any]:
        reply, close = await call(session, encode(Step(id=7)), 0.05 * UNIT)
        session.close()  # the connection ends: the call is still running
        assert session.busy and not env.closed.is_set()
        env.gate.set()  # the call returns at last
        while session.busy:
            await asyncio.sleep(0.01 * UNIT)
        return reply, close

    reply, close = asyncio.run(main())
    error = msgpack.unpackb(reply)
    assert error["code"] == "step_timeout" and error["id"] == 7 and error["fatal"]
    assert close is not None and close.code == 1011
    assert env.closed.is_set() and not factory.given_back  # closed, never reused
    assert session.env is None


def test_cold_opens_beyond_the_bound_are_refused() -> None:
    turns = ColdOpens(0.5, 1)

    async def main() -> None:
        assert await turns.turn() is None  # nothing built yet: at once
        turns.done(30.0 * UNIT)  # the next may start 30 units later
        waiting = asyncio.ensure_future(turns.turn())
        await asyncio.sleep(0)
        assert turns.waiting == 1
        assert "already wait" in (await turns.turn() or "")  # the bound of one waiting open
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    assert turns.stats() == {"share": 0.5, "built": 1, "paced": 1, "waiting": 0, "refused": 1}


def test_one_address_may_fill_a_quarter_of_the_queue() -> None:
    turns = ColdOpens(0.5, 8)
    assert turns.max_waiting_per_peer == 2

    async def main() -> None:
        turns.done(30.0 * UNIT)
        waiting = [asyncio.ensure_future(turns.turn(peer)) for peer in ("a", "a", "b")]
        await asyncio.sleep(0)
        assert turns.waiting == 3
        assert "from this address" in (await turns.turn("a") or "")
        other = asyncio.ensure_future(turns.turn("c"))
        await asyncio.sleep(0)
        assert turns.waiting == 4 and not other.done()
        for task in (*waiting, other):
            task.cancel()
        await asyncio.gather(*waiting, other, return_exceptions=True)

    asyncio.run(main())
    assert turns.waiting == 0 and turns.refused == 1 and turns.paced == 4


def test_spec_reports_inline_by_default_false() -> None:
    assert Environment.inline is False
    assert FakeEnvironment().inline is True
    assert FakeEnvironment({"step_sleep": 0.01}).inline is False
    assert isinstance(FakeEnvironment().spec, EnvSpec)


def test_cold_builds_are_not_paced_while_no_session_steps() -> None:
    last_step = [0.0]  # perf_counter time of the last step of any session
    turns = ColdOpens(0.5, 8, last_step=lambda: last_step[0])

    async def main() -> None:
        turns.done(30.0 * UNIT)  # the next build would wait 30 units if anyone stepped
        assert await turns.turn() is None  # nobody steps: at once
        assert turns.paced == 0
        last_step[0] = time.perf_counter()  # a session just stepped
        waiter = asyncio.ensure_future(turns.turn())
        await asyncio.sleep(0)
        assert not waiter.done() and turns.paced == 1  # now it waits its turn
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert turns.waiting == 0

    asyncio.run(main())


def test_opens_waiting_stop_resting_once_nobody_steps() -> None:
    last_step = [time.perf_counter()]  # a session just stepped
    turns = ColdOpens(0.5, 8, last_step=lambda: last_step[0])

    async def main() -> None:
        turns.done(3600.0)  # the next build would rest an hour while anyone steps
        waiter = asyncio.ensure_future(turns.turn())
        await asyncio.sleep(0.05)
        assert not waiter.done() and turns.waiting == 1
        last_step[0] = 0.0  # nobody has stepped since: nobody to stall
        assert await asyncio.wait_for(waiter, 10 * UNIT) is None
        assert turns.waiting == 0 and turns.paced == 1

    asyncio.run(main())
