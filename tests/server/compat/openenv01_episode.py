"""Plays one episode with openenv-core 0.1.x's ``HTTPEnvClient``; prints it as JSON.

Run with openenv-core 0.1.x first on ``PYTHONPATH`` (see ``conftest.py``):
``python openenv01_episode.py BASE_URL MAX_STEPS``. The Atari client is
written as OpenEnv's Atari client of that generation was: a subclass with
``_step_payload``, ``_parse_result`` and ``_parse_state``, dataclass models.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import openenv_core
from openenv_core.client_types import StepResult
from openenv_core.env_server.types import Action, Observation, State
from openenv_core.http_env_client import HTTPEnvClient


@dataclass(kw_only=True)
class AtariAction(Action):
    action_id: int
    game_name: str = "pong"


@dataclass(kw_only=True)
class AtariObservation(Observation):
    screen: list[int] = field(default_factory=list)
    screen_shape: list[int] = field(default_factory=list)
    legal_actions: list[int] = field(default_factory=list)
    lives: int = 0
    episode_frame_number: int = 0
    frame_number: int = 0


@dataclass
class AtariState(State):
    game_name: str = "pong"
    frameskip: int = 4


class AtariEnv(HTTPEnvClient[AtariAction, AtariObservation]):
    def _step_payload(self, action: AtariAction) -> dict[str, Any]:
        return {"action_id": action.action_id, "game_name": action.game_name}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AtariObservation]:
        fields = payload["observation"]
        obs = AtariObservation(
            **{
                k: fields[k]
                for k in (
                    "screen",
                    "screen_shape",
                    "legal_actions",
                    "lives",
                    "episode_frame_number",
                    "frame_number",
                )
            },
            reward=payload["reward"],
            done=payload["done"],
        )
        return StepResult(observation=obs, reward=payload["reward"], done=payload["done"])

    def _parse_state(self, payload: dict[str, Any]) -> AtariState:
        return AtariState(
            episode_id=payload["episode_id"],
            step_count=payload["step_count"],
            game_name=payload["game_name"],
            frameskip=payload["frameskip"],
        )


def main(base_url: str, max_steps: int) -> None:
    env = AtariEnv(base_url=base_url)
    records = []
    result = env.reset()
    states = [env.state()]

    def record(r: StepResult[AtariObservation]) -> None:
        o = r.observation
        records.append(
            {
                "reward": r.reward,
                "done": r.done,
                "lives": o.lives,
                "episode_frame_number": o.episode_frame_number,
                "frame_number": o.frame_number,
                "screen_len": len(o.screen),
                "screen_shape": o.screen_shape,
            }
        )

    record(result)
    steps = 0
    while not result.done and steps < max_steps:
        result = env.step(AtariAction(action_id=steps % len(result.observation.legal_actions)))
        steps += 1
        record(result)
        if steps % 20 == 0:
            states.append(env.state())
    states.append(env.state())
    env.close()
    print(
        json.dumps(
            {
                "client_module": openenv_core.__file__,
                "client_version": "0.1",
                "steps": records,
                "states": [vars(s) for s in states],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
