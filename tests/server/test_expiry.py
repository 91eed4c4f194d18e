"""The idle expiry: keyed checks run at their time on one timer, re-run when they ask."""

from __future__ import annotations

import asyncio

from openenv_ws.server.session.expiry import Expiry

from ..conftest import UNIT

STEP = 0.02 * UNIT


def test_checks_run_in_time_order_and_again_when_they_ask() -> None:
    async def main() -> list[str]:
        expiry = Expiry()
        ran: list[str] = []
        loop = asyncio.get_running_loop()
        again = [2]

        def repeat(now: float) -> float | None:
            ran.append("repeat")
            again[0] -= 1
            return now + STEP if again[0] >= 0 else None

        expiry.after("late", 3 * STEP, lambda now: ran.append("late"))
        expiry.after("early", STEP, lambda now: ran.append("early"))
        expiry.at("repeat", loop.time() + 2 * STEP, repeat)
        while len(expiry):
            await asyncio.sleep(STEP)
        return ran

    ran = asyncio.run(main())
    assert ran.index("early") < ran.index("late")
    assert ran.count("repeat") == 3 and ran.count("early") == 1 and ran.count("late") == 1


def test_a_cancelled_or_replaced_check_does_not_run() -> None:
    async def main() -> list[str]:
        expiry = Expiry()
        ran: list[str] = []
        expiry.after("a", STEP, lambda now: ran.append("a"))
        expiry.after("b", STEP, lambda now: ran.append("b1"))
        expiry.after("b", 2 * STEP, lambda now: ran.append("b2"))
        expiry.cancel("a")
        assert "a" not in expiry and "b" in expiry
        while len(expiry):
            await asyncio.sleep(STEP)
        expiry.after("c", STEP, lambda now: ran.append("c"))
        expiry.close()
        await asyncio.sleep(3 * STEP)
        return ran

    assert asyncio.run(main()) == ["b2"]


def test_a_failing_check_is_logged_and_the_others_still_run(caplog: object) -> None:
    async def main() -> list[str]:
        expiry = Expiry()
        ran: list[str] = []

        def broken(now: float) -> float | None:
            raise RuntimeError("boom")

        expiry.after("broken", STEP, broken)
        expiry.after("fine", STEP, lambda now: ran.append("fine"))
        while len(expiry):
            await asyncio.sleep(STEP)
        return ran

    assert asyncio.run(main()) == ["fine"]
