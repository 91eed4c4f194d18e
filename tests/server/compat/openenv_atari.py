"""OpenEnv's Atari client, rebuilt on openenv-core 0.3's generic ``EnvClient``.

openenv-core ships the WebSocket client but not OpenEnv's Atari environment
package (``envs/atari_env``). These models and the client follow that
package's: the action is ``{"action_id", "game_name", "obs_type",
"full_action_space"}`` and the observation is parsed field by field.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import Action, Observation, State


class AtariAction(Action):
    action_id: int
    game_name: str = "pong"
    obs_type: Literal["rgb", "grayscale", "ram"] = "rgb"
    full_action_space: bool = False


class AtariObservation(Observation):
    screen: list[int]
    screen_shape: list[int]
    legal_actions: list[int]
    lives: int = 0
    episode_frame_number: int = 0
    frame_number: int = 0
    screen_image: str | None = None


class AtariState(State):
    game_name: str = "pong"
    obs_type: Literal["rgb", "grayscale", "ram"] = "rgb"
    full_action_space: bool = False
    mode: int | None = None
    difficulty: int | None = None
    repeat_action_probability: float = 0.0
    frameskip: int = 4


class AtariEnv(EnvClient[AtariAction, AtariObservation, AtariState]):
    """The typed Atari client, as an OpenEnv user writes it: three hooks over the JSON."""

    def _step_payload(self, action: AtariAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AtariObservation]:
        fields = payload.get("observation", {})
        known = AtariObservation.model_fields.keys() - {"done", "reward"}
        observation = AtariObservation(
            **{k: v for k, v in fields.items() if k in known},
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation, payload.get("reward"), payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> AtariState:
        known = AtariState.model_fields.keys()
        return AtariState(**{k: v for k, v in payload.items() if k in known})
