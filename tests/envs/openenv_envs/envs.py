"""Environments written the way openenv-core's documentation shows, served unchanged in tests.

Nothing here knows openenv-ws: Pydantic ``Action``/``Observation`` models, an
``Environment`` subclass with ``reset``, ``step`` and ``state``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State


class EchoAction(Action):
    """The message to echo."""

    message: str


class EchoObservation(Observation):
    """The echoed message and its length."""

    echoed_message: str
    message_length: int = 0


class EchoEnvironment(Environment):
    """Echoes each message back; the reward is 0.1 per character."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._reset_count = 0

    def reset(self) -> EchoObservation:  # type: ignore[override]
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._reset_count += 1
        return EchoObservation(
            echoed_message="Echo environment ready!", message_length=0, done=False, reward=0.0
        )

    def step(self, action: EchoAction) -> EchoObservation:  # type: ignore[override]
        self._state.step_count += 1
        message = action.message
        return EchoObservation(
            echoed_message=message,
            message_length=len(message),
            done=False,
            reward=len(message) * 0.1,
            metadata={"original_message": message, "step": self._state.step_count},
        )

    @property
    def state(self) -> State:
        return self._state


class CountAction(Action):
    """Add ``amount`` to the session's counter."""

    amount: int = 1


class CountObservation(Observation):
    total: int
    history: list[int]


class CounterEnvironment(Environment[CountAction, CountObservation, State]):
    """A counter per instance, starting at the reset's seed; the episode ends once 10
    or more was added."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._total = 0
        self._history: list[int] = []
        self._state = State()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CountObservation:
        self._total = seed or 0
        self._history = []
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return CountObservation(total=self._total, history=[], reward=None)

    def step(
        self, action: CountAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CountObservation:
        self._state.step_count += 1
        self._total += action.amount
        self._history.append(action.amount)
        return CountObservation(
            total=self._total,
            history=list(self._history),
            reward=float(action.amount),
            done=sum(self._history) >= 10,
        )

    @property
    def state(self) -> State:
        return self._state


class SoloEnvironment(CounterEnvironment):
    """The counter, without SUPPORTS_CONCURRENT_SESSIONS: one session at a time."""

    SUPPORTS_CONCURRENT_SESSIONS = False
    instances = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).instances += 1


#: Set by a test to let :class:`AsyncEnvironment`'s waiting steps finish.
RELEASE = threading.Event()
#: Set by :class:`AsyncEnvironment` when a waiting step starts waiting.
WAITING = threading.Event()


class WaitAction(Action):
    wait: bool = False
    message: str = ""


class AsyncEnvironment(Environment[WaitAction, EchoObservation, State]):
    """Async reset and step; a step with ``wait`` awaits :data:`RELEASE` (asyncio sleeps)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EchoObservation:
        raise AssertionError("the server must call reset_async")

    async def reset_async(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> EchoObservation:
        await asyncio.sleep(0)
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(echoed_message="ready", reward=None)

    def step(
        self, action: WaitAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EchoObservation:
        raise AssertionError("the server must call step_async")

    async def step_async(
        self, action: WaitAction, timeout_s: float | None = None, **kwargs: Any
    ) -> EchoObservation:
        if action.wait:
            WAITING.set()
        while action.wait and not RELEASE.is_set():
            await asyncio.sleep(0.005)
        self._state.step_count += 1
        return EchoObservation(
            echoed_message=action.message, message_length=len(action.message), reward=1.0
        )

    @property
    def state(self) -> State:
        return self._state


class ToolEnvironment(MCPEnvironment):
    """An MCP environment with two tools: ``add`` and ``shout``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("tools")

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool()
        def shout(text: str) -> str:
            """The text in capitals."""
            return text.upper()

        super().__init__(mcp)
        self._state = State()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(done=False, reward=0.0, metadata={"status": "ready"})

    def _step_impl(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        return Observation(
            done=False, reward=0.0, metadata={"error": f"unknown action {type(action).__name__}"}
        )

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        self._state.step_count += 1
        return super().step(action, timeout_s=timeout_s, **kwargs)

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state


class ThreadBoundEnvironment(CounterEnvironment):
    """The counter, built, called and closed on one thread (e.g. a sync Playwright env)."""

    REQUIRES_SINGLE_THREAD_EXECUTOR = True
    threads: ClassVar[set[int]] = set()

    def __init__(self) -> None:
        super().__init__()
        self.threads.add(threading.get_ident())

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> CountObservation:
        self.threads.add(threading.get_ident())
        return super().reset(seed, episode_id, **kwargs)

    def step(
        self, action: CountAction, timeout_s: float | None = None, **kwargs: Any
    ) -> CountObservation:
        self.threads.add(threading.get_ident())
        return super().step(action, timeout_s, **kwargs)

    @property
    def state(self) -> State:
        self.threads.add(threading.get_ident())
        return self._state

    def close(self) -> None:
        self.threads.add(threading.get_ident())
