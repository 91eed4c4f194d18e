"""Typed Atari action, observation and state, as a client sees them.

They mirror OpenEnv's Atari models (``AtariAction``, ``AtariObservation``,
``AtariState``) but carry the screen as a numpy array, not a flat list, and
are built from protocol v1 frames with the ``from_*`` classmethods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AtariAction", "AtariObservation", "AtariState"]


@dataclass(frozen=True, slots=True)
class AtariAction:
    """An index into the session's action set (``spec.action``; 0 is NOOP)."""

    action_id: int

    def to_wire(self) -> int:
        """The value a ``step`` frame carries as its ``action``."""
        return self.action_id


@dataclass(slots=True, eq=False)
class AtariObservation:
    """What the agent sees after a reset or a step.

    ``screen`` is the observation array (210x160x3 RGB, 210x160 grayscale or
    128 RAM bytes), or None when the step asked for no observation. Instances
    compare by identity, as numpy arrays have no single truth value.
    """

    screen: np.ndarray[Any, Any] | None
    screen_shape: tuple[int, ...]
    legal_actions: list[int]
    lives: int = 0
    episode_frame_number: int = 0
    frame_number: int = 0
    reward: float = 0.0
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_result(cls, result: Any, *, legal_actions: Sequence[int] = ()) -> AtariObservation:
        """Build from a ``result`` frame (or anything with its attributes, e.g. an ``EnvResult``).

        Args:
            result: has ``obs``, ``reward``, ``terminated``, ``truncated``, ``done``
                and an ``info`` map holding ``lives`` and the frame numbers.
            legal_actions: the session's action indices (``spec.extra["legal_actions"]``).
        """
        return cls.from_wire(
            {name: getattr(result, name) for name in _RESULT_FIELDS}, legal_actions=legal_actions
        )

    @classmethod
    def from_wire(
        cls, fields: Mapping[str, Any], *, legal_actions: Sequence[int] = ()
    ) -> AtariObservation:
        """Build from the fields of a ``result`` frame (``obs``, ``reward``, ``info``, ...).

        Raises:
            KeyError: a field or an info key of an Atari result is missing.
        """
        screen = fields["obs"]
        info = dict(fields["info"])
        return cls(
            screen=screen,
            screen_shape=tuple(screen.shape) if screen is not None else (),
            legal_actions=list(legal_actions),
            lives=int(info["lives"]),
            episode_frame_number=int(info["episode_frame_number"]),
            frame_number=int(info["frame_number"]),
            reward=float(fields["reward"]),
            done=bool(fields["done"]),
            terminated=bool(fields["terminated"]),
            truncated=bool(fields["truncated"]),
            info=info,
        )


_RESULT_FIELDS = ("obs", "reward", "terminated", "truncated", "done", "info")


@dataclass(frozen=True, slots=True)
class AtariState:
    """The episode state and the game's settings, as ``state()`` reports them."""

    episode_id: str | None = None
    step_count: int = 0
    game_name: str = "pong"
    obs_type: str = "rgb"
    full_action_space: bool = False
    mode: int | None = None
    difficulty: int | None = None
    repeat_action_probability: float = 0.25
    frameskip: int | tuple[int, int] = 4
    max_episode_steps: int | None = None
    lives: int = 0

    @classmethod
    def from_wire(cls, state: Mapping[str, Any]) -> AtariState:
        """Build from the ``state`` map of a ``state`` frame; extra keys are ignored.

        Raises:
            KeyError: a key of the Atari state is missing.
        """
        frameskip = state["frameskip"]
        return cls(
            episode_id=state["episode_id"],
            step_count=int(state["step_count"]),
            game_name=str(state["game_name"]),
            obs_type=str(state["obs_type"]),
            full_action_space=bool(state["full_action_space"]),
            mode=state["mode"],
            difficulty=state["difficulty"],
            repeat_action_probability=float(state["repeat_action_probability"]),
            frameskip=tuple(frameskip) if isinstance(frameskip, list | tuple) else int(frameskip),
            max_episode_steps=state["max_episode_steps"],
            lives=int(state["lives"]),
        )
