"""OpenEnv-style environments for the structured-environment benchmark, written on
openenv-core's interfaces as its documentation shows, and served by openenv-core's
own ``create_app`` under uvicorn (the peer) or by ``openenv-ws serve --env openenv``.

- ``echo``: a text environment (openenv-core's echo example): the action a message,
  the observation the message and its length.
- ``cartpole``: Gymnasium's CartPole-v1 behind OpenEnv's Action/Observation models.

``python -m benchmarks.peers.openenv_envs`` serves the one ``PEER_ENV`` names
(default ``echo``) and prints ``serving on http://HOST:PORT``.
"""

# openenv-core ships no type information: its base classes are Any to mypy.
# mypy: disable-error-code="misc"

from __future__ import annotations

import os
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Action, Environment, Observation, State, create_app

from . import serve

__all__ = [
    "CartPoleAction",
    "CartPoleEnvironment",
    "CartPoleObservation",
    "EchoAction",
    "EchoEnvironment",
    "EchoObservation",
    "main",
]


class EchoAction(Action):
    message: str


class EchoObservation(Observation):
    echoed_message: str
    message_length: int = 0


class EchoEnvironment(Environment[EchoAction, EchoObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return EchoObservation(echoed_message="ready", message_length=0, reward=0.0)

    def step(self, action: EchoAction, timeout_s: float | None = None, **kw: Any) -> Any:
        self._state.step_count += 1
        n = len(action.message)
        return EchoObservation(echoed_message=action.message, message_length=n, reward=n * 0.1)

    @property
    def state(self) -> State:
        return self._state


class CartPoleAction(Action):
    action: int


class CartPoleObservation(Observation):
    observation: list[float]


class CartPoleEnvironment(Environment[CartPoleAction, CartPoleObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        import gymnasium

        super().__init__()
        self._env = gymnasium.make("CartPole-v1")
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Any:
        obs, _ = self._env.reset(seed=seed)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return CartPoleObservation(observation=obs.tolist(), reward=0.0)

    def step(self, action: CartPoleAction, timeout_s: float | None = None, **kw: Any) -> Any:
        obs, reward, terminated, truncated, _ = self._env.step(action.action)
        self._state.step_count += 1
        return CartPoleObservation(
            observation=obs.tolist(), reward=float(reward), done=terminated or truncated
        )

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self._env.close()


_ENVS = {
    "echo": (EchoEnvironment, EchoAction, EchoObservation),
    "cartpole": (CartPoleEnvironment, CartPoleAction, CartPoleObservation),
}


def main() -> None:
    env, action, observation = _ENVS[os.environ.get("PEER_ENV", "echo")]
    serve(create_app(env, action, observation, max_concurrent_envs=8))


if __name__ == "__main__":
    main()
