"""Every way of reaching an environment, behind one small synchronous interface.

The conformance contract (``test_contract.py``) is written once against
:class:`Transport`; each subclass reaches the environment another way: in
process (the environment driven under the protocol's session state machine,
as a server drives it), over a WebSocket with the blocking and the asyncio
client, over the HTTP fallback in MessagePack and in JSON, and through the
vector client.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openenv_ws.client import AsyncEnvClient, EnvClient, HTTPEnvClient
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.environment import EnvFactory, EnvSpec
from openenv_ws.errors import InvalidState
from openenv_ws.protocol import SessionMachine


@dataclass
class Outcome:
    """What reset and step return, whatever the transport."""

    obs: np.ndarray[Any, Any] | None
    reward: float
    terminated: bool
    truncated: bool
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class Transport(abc.ABC):
    """One session with an environment."""

    #: False for a transport without ``state()`` (the contract leaves those checks out).
    supports_state = True

    spec: EnvSpec

    @abc.abstractmethod
    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Outcome: ...

    @abc.abstractmethod
    def step(self, action: Any, *, obs: bool = True) -> Outcome: ...

    @abc.abstractmethod
    def state(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def dispose(self) -> None:  # noqa: B027 - optional hook
        """Free what the transport itself holds, after the session is closed."""


def _outcome(r: Any) -> Outcome:
    return Outcome(r.observation, r.reward, r.terminated, r.truncated, r.done, dict(r.info))


class InProcess(Transport):
    """The environment itself, under the session state machine a server applies."""

    def __init__(self, factory: EnvFactory, config: Mapping[str, Any]) -> None:
        self._env = factory(dict(config))
        self.spec = self._env.spec
        self._machine = SessionMachine()
        self._machine.served("open")

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Outcome:
        self._machine.check("reset")
        r = self._env.reset(seed=seed, episode_id=episode_id)
        self._machine.served("reset", done=r.done)
        return Outcome(r.obs, float(r.reward), r.terminated, r.truncated, r.done, dict(r.info))

    def step(self, action: Any, *, obs: bool = True) -> Outcome:
        self._machine.check("step")
        r = self._env.step(action, obs=obs)
        self._machine.served("step", done=r.done)
        return Outcome(r.obs, float(r.reward), r.terminated, r.truncated, r.done, dict(r.info))

    def state(self) -> dict[str, Any]:
        self._machine.check("state")
        return self._env.state()

    def close(self) -> None:
        try:
            self._machine.check("close")
        except InvalidState:
            return  # already closed
        self._machine.closed()
        self._env.close()


class Blocking(Transport):
    """A blocking client: the WebSocket ``EnvClient`` or the ``HTTPEnvClient``."""

    def __init__(self, client: EnvClient[Any] | HTTPEnvClient[Any]) -> None:
        self._client = client
        self.spec = client.spec

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Outcome:
        return _outcome(self._client.reset(seed=seed, episode_id=episode_id))

    def step(self, action: Any, *, obs: bool = True) -> Outcome:
        return _outcome(self._client.step(action, obs=obs))

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self._client.state()
        return state

    def close(self) -> None:
        self._client.close()


class Async(Transport):
    """The asyncio client, driven on a private event loop."""

    def __init__(self, url: str, config: Mapping[str, Any]) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._client: AsyncEnvClient[Any] = self._run(
                AsyncEnvClient.connect(url, config=config)
            )
        except BaseException:
            self._loop.close()
            raise
        self.spec = self._client.spec

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Outcome:
        return _outcome(self._run(self._client.reset(seed=seed, episode_id=episode_id)))

    def step(self, action: Any, *, obs: bool = True) -> Outcome:
        return _outcome(self._run(self._client.step(action, obs=obs)))

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self._run(self._client.state())
        return state

    def close(self) -> None:
        self._run(self._client.close())

    def dispose(self) -> None:
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()


class Vector(Transport):
    """The vector client with one env and autoreset disabled: batched calls of one row."""

    supports_state = False

    def __init__(self, url: str, config: Mapping[str, Any]) -> None:
        self._client = VectorEnvClient(url, 1, config=config, autoreset_mode="disabled")
        self.spec = self._client.spec

    def reset(self, *, seed: int | None = None, episode_id: str | None = None) -> Outcome:
        obs, infos = self._client.reset(seed=seed)
        return Outcome(obs[0], 0.0, False, False, False, _row(infos))

    def step(self, action: Any, *, obs: bool = True) -> Outcome:
        observations, rewards, terms, truncs, infos = self._client.step(np.array([action]))
        term, trunc = bool(terms[0]), bool(truncs[0])
        return Outcome(observations[0], float(rewards[0]), term, trunc, term or trunc, _row(infos))

    def state(self) -> dict[str, Any]:
        raise NotImplementedError("the vector client has no state()")

    def close(self) -> None:
        self._client.close()


def _row(infos: Mapping[str, Any]) -> dict[str, Any]:
    """Row 0 of Gymnasium-style stacked infos (entries the env actually set)."""
    out: dict[str, Any] = {}
    for key, values in infos.items():
        if key.startswith("_") or key == "env_id":
            continue
        mask = infos.get(f"_{key}")
        if mask is None or bool(mask[0]):
            value = values[0]
            out[key] = value.item() if isinstance(value, np.generic) else value
    return out


#: name -> maker of a session from (server URL, environment factory, config).
Maker = Callable[[str, EnvFactory, Mapping[str, Any]], Transport]
#: The transports whose steps can leave the observation out (``obs=False``).
NO_OBS = {
    "in-process",
    "websocket-sync",
    "websocket-sync-socket",
    "websocket-async",
    "http-msgpack",
    "http-json",
}
TRANSPORTS: dict[str, Maker] = {
    "in-process": lambda url, factory, config: InProcess(factory, config),
    "websocket-sync": lambda url, factory, config: Blocking(EnvClient(url, config=config)),
    "websocket-sync-socket": lambda url, factory, config: Blocking(
        EnvClient(url, config=config, shared_memory=False)
    ),
    "websocket-async": lambda url, factory, config: Async(url, config),
    "http-msgpack": lambda url, factory, config: Blocking(HTTPEnvClient(url, config=config)),
    "http-json": lambda url, factory, config: Blocking(
        HTTPEnvClient(url, config=config, encoding="json")
    ),
    "vector": lambda url, factory, config: Vector(url, config),
}
