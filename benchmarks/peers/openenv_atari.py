"""The peer: OpenEnv's Atari environment behind openenv-core's own server and clients.

The ``openenv-core`` package on PyPI ships OpenEnv's server (``create_app``:
FastAPI, ``WS /ws`` and ``POST /step``) and its WebSocket ``EnvClient``, but
not its Atari environment, which lives only in OpenEnv's source tree
(``envs/atari_env``). This module rebuilds that environment on
openenv-core's interfaces with the same observable behaviour, so the server
code path, the JSON messages and their size are OpenEnv's:

- the observation holds ``screen`` as a flat list of ints, ``screen_shape``,
  ``legal_actions``, ``lives``, ``episode_frame_number``, ``frame_number`` and
  the action names in ``metadata``; for RGB also ``screen_image``, a base64
  PNG of the frame (disable with ``ATARI_SCREEN_IMAGE=0``);
- the action is ``{"action_id": i}`` into the minimal (or full) action set;
- an agent step repeats the action ``ATARI_FRAMESKIP`` times, stopping early
  at game over; ``reset`` ignores the seed, as OpenEnv's does;
- configured by ``ATARI_GAME``, ``ATARI_OBS_TYPE``, ``ATARI_FULL_ACTION_SPACE``,
  ``ATARI_MODE``, ``ATARI_DIFFICULTY``, ``ATARI_REPEAT_ACTION_PROB`` and
  ``ATARI_FRAMESKIP``.

``python -m benchmarks.peers.openenv_atari`` serves it with uvicorn's default
settings (as OpenEnv's image runs it) on a free port of ``PEER_HOST``
(default 127.0.0.1) and prints ``serving on http://HOST:PORT``.
"""

# openenv-core ships no type information: its base classes are Any to mypy.
# mypy: disable-error-code="misc"

from __future__ import annotations

import base64
import io
import os
import uuid
from typing import Any, Literal

import numpy as np
from ale_py import ALEInterface, LoggerMode, roms
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import Action, Environment, Observation, State, create_app

from . import serve

__all__ = ["AtariAction", "AtariObservation", "AtariState", "OpenEnvAtari", "OpenEnvAtariClient"]

ObsType = Literal["rgb", "grayscale", "ram"]


class AtariAction(Action):
    """An index into the game's action set."""

    action_id: int
    game_name: str = "pong"
    obs_type: ObsType = "rgb"
    full_action_space: bool = False


class AtariObservation(Observation):
    """The screen (flattened), its shape and the game counters."""

    screen: list[int]
    screen_shape: list[int]
    legal_actions: list[int]
    lives: int = 0
    episode_frame_number: int = 0
    frame_number: int = 0
    screen_image: str | None = None


class AtariState(State):
    """The episode counters and the game configuration."""

    game_name: str = "pong"
    obs_type: ObsType = "rgb"
    full_action_space: bool = False
    mode: int | None = None
    difficulty: int | None = None
    repeat_action_probability: float = 0.0
    frameskip: int = 4


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return None if value in (None, "") else int(value)


class OpenEnvAtari(Environment[AtariAction, AtariObservation, AtariState]):
    """One ALE game, configured from the ``ATARI_*`` environment variables."""

    def __init__(self) -> None:
        super().__init__()
        self.game = os.environ.get("ATARI_GAME", "pong")
        self.obs_type: ObsType = os.environ.get("ATARI_OBS_TYPE", "rgb")  # type: ignore[assignment]
        full = os.environ.get("ATARI_FULL_ACTION_SPACE", "false").lower() == "true"
        self.frameskip = int(os.environ.get("ATARI_FRAMESKIP", "4"))
        sticky = float(os.environ.get("ATARI_REPEAT_ACTION_PROB", "0.0"))
        self.screen_image = os.environ.get("ATARI_SCREEN_IMAGE", "1") != "0"
        mode, difficulty = _env_int("ATARI_MODE"), _env_int("ATARI_DIFFICULTY")

        self.ale = ale = ALEInterface()
        ale.setLoggerMode(LoggerMode.Error)
        ale.setFloat("repeat_action_probability", sticky)
        rom = roms.get_rom_path(self.game)
        if rom is None:
            raise ValueError(f"no bundled ROM for {self.game!r}")
        ale.loadROM(rom)
        if mode is not None:
            ale.setMode(mode)
        if difficulty is not None:
            ale.setDifficulty(difficulty)
        self.actions = list(ale.getLegalActionSet() if full else ale.getMinimalActionSet())
        height, width = ale.getScreenDims()
        self.shape = {
            "rgb": [height, width, 3],
            "grayscale": [height, width],
            "ram": [ale.getRAMSize()],
        }[self.obs_type]
        self._state = AtariState(
            game_name=self.game,
            obs_type=self.obs_type,
            full_action_space=full,
            mode=mode,
            difficulty=difficulty,
            repeat_action_probability=sticky,
            frameskip=self.frameskip,
        )

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> AtariObservation:
        self.ale.reset_game()
        self._state.episode_id = str(uuid.uuid4())
        self._state.step_count = 0
        return self._observe(0.0)

    def step(
        self, action: AtariAction, timeout_s: float | None = None, **kwargs: Any
    ) -> AtariObservation:
        if not 0 <= action.action_id < len(self.actions):
            raise ValueError(f"action_id {action.action_id} is not in [0, {len(self.actions)})")
        ale_action = self.actions[action.action_id]
        reward = 0.0
        for _ in range(self.frameskip):
            reward += self.ale.act(ale_action)
            if self.ale.game_over():
                break
        self._state.step_count += 1
        return self._observe(reward)

    @property
    def state(self) -> AtariState:
        return self._state

    def _observe(self, reward: float) -> AtariObservation:
        ale = self.ale
        screen: np.ndarray[Any, Any] = {
            "rgb": ale.getScreenRGB,
            "grayscale": ale.getScreenGrayscale,
            "ram": ale.getRAM,
        }[self.obs_type]()
        obs = AtariObservation(
            screen=screen.ravel().tolist(),
            screen_shape=self.shape,
            legal_actions=list(range(len(self.actions))),
            lives=ale.lives(),
            episode_frame_number=ale.getEpisodeFrameNumber(),
            frame_number=ale.getFrameNumber(),
            done=ale.game_over(),
            reward=reward,
            metadata={"game_name": self.game, "action_meanings": [str(a) for a in self.actions]},
        )
        if self.obs_type == "rgb" and self.screen_image:
            obs.screen_image = _png_data_url(screen)
        return obs


def _png_data_url(screen: np.ndarray[Any, Any]) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(screen.astype(np.uint8)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def parse_result(payload: dict[str, Any]) -> StepResult[AtariObservation]:
    """A ``/step`` or WebSocket observation payload as OpenEnv's Atari client reads it."""
    data = payload.get("observation", {})
    observation = AtariObservation(
        screen=data.get("screen", []),
        screen_shape=data.get("screen_shape", []),
        legal_actions=data.get("legal_actions", []),
        lives=data.get("lives", 0),
        episode_frame_number=data.get("episode_frame_number", 0),
        frame_number=data.get("frame_number", 0),
        done=payload.get("done", False),
        reward=payload.get("reward"),
        metadata=data.get("metadata", {}),
        screen_image=data.get("screen_image"),
    )
    return StepResult(
        observation=observation, reward=payload.get("reward"), done=payload.get("done", False)
    )


class OpenEnvAtariClient(EnvClient[AtariAction, AtariObservation, AtariState]):
    """openenv-core's WebSocket ``EnvClient`` for the Atari observation."""

    def _step_payload(self, action: AtariAction) -> dict[str, Any]:
        return {
            "action_id": action.action_id,
            "game_name": action.game_name,
            "obs_type": action.obs_type,
            "full_action_space": action.full_action_space,
        }

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[AtariObservation]:
        return parse_result(payload)

    def _parse_state(self, payload: dict[str, Any]) -> AtariState:
        return AtariState(**payload)


app = create_app(OpenEnvAtari, AtariAction, AtariObservation, env_name="atari_env")


def main() -> None:
    serve(app)


if __name__ == "__main__":
    main()
