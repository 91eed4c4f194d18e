"""One instance of an OpenEnv environment serving one session: actions validated into the
Action model, observations dumped as section 22 values, calls on the app's thread or loop."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ...environment import Environment, EnvResult, EnvSpec
from ...errors import InvalidAction, InvalidState
from .app import CoroutineLoop, OpenEnvApp, close_resources
from .dump import dump, jsonable, wire_value
from .models import core

__all__ = ["OpenEnvEnvironment"]

#: Longest message a validation error gives (a hostile action may be huge).
_MAX_WHY = 600


def _overrides(env: Any, name: str) -> bool:
    base = getattr(core().Environment, name)
    return getattr(type(env), name, base) is not base


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments `fn` takes (all of them if it takes ``**kwargs``), as
    openenv-core's server passes them."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


_UNSENT = frozenset({"done", "metadata"})  # an observation's fields a result carries apart


def _why(exc: Any, name: str) -> str:
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err.get("loc", ())) or "(the action)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    text = f"the action is not a valid {name}: " + "; ".join(parts)
    return text if len(text) <= _MAX_WHY else text[: _MAX_WHY - 3] + "..."


class OpenEnvEnvironment(Environment):
    """One instance of an OpenEnv environment, serving one session (see the module)."""

    def __init__(self, app: OpenEnvApp) -> None:
        from openenv.core.env_server.serialization import deserialize_action
        from openenv.core.env_server.types import Observation
        from pydantic import ValidationError

        self._app = app
        self._deserialize = deserialize_action
        self._observation = Observation
        self._refused = ValidationError
        self._loop: CoroutineLoop | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._env: Any = None
        # Calls in progress (the build counts as one) and when the last one ended
        # (monotonic s); both under the app's gate.
        self._calls = 1
        self._last = time.monotonic()
        #: Seconds it had been idle when its environment was handed to another session.
        self.evicted: float | None = None
        self.holding = False  # holds the one instance of an app that is not concurrent
        app.take(self)
        try:
            self._env = app.run(app.factory)
            self._spec: EnvSpec = app.run(app.spec, self._env)
            self._async_reset = _overrides(self._env, "reset_async")
            self._async_step = _overrides(self._env, "step_async")
            mcp_session = getattr(self._env, "mcp_session", None)
            if self._async_reset or self._async_step or callable(mcp_session):
                self._loop = CoroutineLoop()
                if callable(mcp_session):
                    self._stack = self._loop.run(_enter(mcp_session))
        except BaseException:
            self.close()
            raise
        finally:
            with app.gate:
                self._calls -= 1
                self._last = time.monotonic()
        self.inline = app.inline and self._loop is None

    @property
    def spec(self) -> EnvSpec:
        return self._spec

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        kwargs: dict[str, Any] = dict(options or {})
        if seed is not None:
            kwargs["seed"] = seed
        if episode_id is not None:
            kwargs["episode_id"] = episode_id
        with self._call():
            env = self._env
            if self._async_reset:
                assert self._loop is not None
                observation = self._loop.run(env.reset_async(**_accepted(env.reset_async, kwargs)))
            else:
                observation = self._app.run(env.reset, **_accepted(env.reset, kwargs))
        return self._result(observation)

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """A call of the environment: refused once it was handed over, never handed over
        while it runs; its end is the time the idle window counts from."""
        gate = self._app.gate
        with gate:
            if self.evicted is not None:
                raise InvalidState(
                    f"this session sent no request for {self.evicted:.0f} s and its "
                    f"{self._app.env_cls.__name__} (one session at a time) was handed to "
                    "another client; open a new session",
                    code="idle_timeout",
                )
            self._calls += 1
        try:
            yield
        finally:
            with gate:
                self._calls -= 1
                self._last = time.monotonic()

    def idle_for(self) -> float | None:
        """Seconds since its last call ended; None while one runs. Under the app's gate."""
        if self._calls:
            return None
        return time.monotonic() - self._last

    def release_locked(self) -> tuple[Any, CoroutineLoop | None, contextlib.AsyncExitStack | None]:
        """Give up the OpenEnv instance (and its loop): returned for the caller to close
        outside the app's gate, which the caller holds."""
        released = (self._env, self._loop, self._stack)
        self._env = self._loop = self._stack = None
        self.holding = False
        return released

    def step(self, action: Any, *, obs: bool = True) -> EnvResult:
        cls = self._app.action_cls
        if type(action) is not dict:
            raise InvalidAction(
                f"an action is a map of the fields of {cls.__name__}, got {type(action).__name__}"
            )
        try:
            typed = self._deserialize(action, cls)
        except self._refused as exc:
            raise InvalidAction(_why(exc, cls.__name__)) from None
        with self._call():
            env = self._env
            if self._async_step:
                assert self._loop is not None
                observation = self._loop.run(env.step_async(typed))
            else:
                observation = self._app.run(env.step, typed)
        return self._result(observation)

    def _result(self, observation: Any) -> EnvResult:
        if not isinstance(observation, self._observation):
            raise TypeError(
                f"{type(self._env).__name__} returned {type(observation).__name__}, "
                "not an openenv-core Observation"
            )
        reward = observation.reward
        info = wire_value(observation.metadata)
        return EnvResult(
            dump(observation, _UNSENT),
            0.0 if reward is None else float(reward),
            bool(observation.done),
            False,
            info if type(info) is dict else {"metadata": jsonable(observation.metadata)},
        )

    def state(self) -> dict[str, Any]:
        with self._call():
            state = self._app.run(getattr, self._env, "state")
        out = dump(state) if hasattr(state, "model_dump") else wire_value(dict(state or {}))
        if type(out) is not dict:
            raise TypeError(f"{type(self._env).__name__}.state cannot be sent")
        return out

    def close(self) -> None:
        app = self._app
        with app.gate:
            holding = self.holding
            released = self.release_locked()
        try:
            close_resources(app, *released)
        finally:
            if holding:
                app.give(self)


async def _enter(mcp_session: Callable[[], Any]) -> contextlib.AsyncExitStack:
    stack = contextlib.AsyncExitStack()
    await stack.enter_async_context(mcp_session())
    return stack
