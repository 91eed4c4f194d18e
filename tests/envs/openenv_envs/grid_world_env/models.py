"""The grid world's action (a move) and observation (where the agent is)."""

from __future__ import annotations

from enum import StrEnum

from openenv.core.env_server.types import Action, Observation


class Move(StrEnum):
    UP = "UP"
    DOWN = "DOWN"
    LEFT = "LEFT"
    RIGHT = "RIGHT"


class GridWorldAction(Action):
    """One move of the agent."""

    action: Move


class GridWorldObservation(Observation):
    """The agent's cell and what the move did."""

    x: int = 0
    y: int = 0
    message: str = ""
