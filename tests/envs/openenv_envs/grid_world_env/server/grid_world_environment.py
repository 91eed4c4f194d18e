"""A 5x5 grid: the agent starts at (0, 0) and the episode ends on the goal (4, 4);
each move costs 0.1, the goal pays 1. Its annotations name no model class, and it
does not declare SUPPORTS_CONCURRENT_SESSIONS (one session at a time)."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from ..models import GridWorldAction, GridWorldObservation, Move

SIZE = 5
_MOVES = {Move.UP: (0, -1), Move.DOWN: (0, 1), Move.LEFT: (-1, 0), Move.RIGHT: (1, 0)}


class GridWorldEnvironment(Environment):
    """The grid world (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self._x = self._y = 0
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> Observation:
        self._x = self._y = 0
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GridWorldObservation(x=0, y=0, message="start", reward=0.0, done=False)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        assert isinstance(action, GridWorldAction)
        self._state.step_count += 1
        dx, dy = _MOVES[action.action]
        self._x = min(max(self._x + dx, 0), SIZE - 1)
        self._y = min(max(self._y + dy, 0), SIZE - 1)
        goal = (self._x, self._y) == (SIZE - 1, SIZE - 1)
        return GridWorldObservation(
            x=self._x,
            y=self._y,
            message="goal" if goal else "moved",
            reward=1.0 if goal else -0.1,
            done=goal,
        )

    @property
    def state(self) -> State:
        return self._state
