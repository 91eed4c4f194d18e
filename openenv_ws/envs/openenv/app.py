"""An OpenEnv app as this server runs it: its factory and model classes (:func:`load_app`),
the one instance of an environment that is not concurrent and its handover, and the
thread or event loop its calls run on."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...environment import EnvSpec
from ...errors import EnvConfigError, InvalidState
from ...spaces import JsonSpec
from .dump import wire_value
from .models import core, from_models, import_target, model_classes, returned, returns

__all__ = [
    "DEFAULT_HANDOVER",
    "CoroutineLoop",
    "Holder",
    "OpenEnvApp",
    "close_resources",
    "load_app",
]

#: Seconds without a call after which the one session of an environment that is not
#: concurrent is handed to a newcomer asking for it.
DEFAULT_HANDOVER = 10.0

#: The name of the warm pool's thread, which builds spares (openenv_ws.server.runtime.pool).
_SPARES_THREAD = "openenv-ws-warm-pool"


class Holder(Protocol):
    """A session holding the one instance of an app that is not concurrent."""

    #: Seconds it had been idle when its instance was handed to another session.
    evicted: float | None
    #: Whether it holds the instance.
    holding: bool

    def idle_for(self) -> float | None: ...

    def release_locked(
        self,
    ) -> tuple[Any, CoroutineLoop | None, contextlib.AsyncExitStack | None]: ...


@dataclass
class OpenEnvApp:
    """What an OpenEnv app is built from, and how this server runs it.

    Attributes:
        factory: the environment class, or a callable without arguments returning one.
        action_cls, observation_cls: the Pydantic Action and Observation classes.
        env_cls: the environment's class (its ``SUPPORTS_CONCURRENT_SESSIONS`` decides).
        inline: call the environment on the event loop (its calls are short).
        handover: seconds without a call after which the one instance of an
            environment that is not concurrent goes to a newcomer (None: never).
    """

    factory: Callable[[], Any]
    action_cls: type[Any]
    observation_cls: type[Any]
    env_cls: type[Any]
    inline: bool = False
    handover: float | None = DEFAULT_HANDOVER
    _spec: EnvSpec | None = field(default=None, repr=False)
    gate: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _holder: Holder | None = field(default=None, repr=False)
    _single: ThreadPoolExecutor | None = field(default=None, repr=False)

    @property
    def concurrent(self) -> bool:
        return bool(getattr(self.env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False))

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; for an environment that sets
        ``REQUIRES_SINGLE_THREAD_EXECUTOR``, on the one thread all its instances use."""
        if not getattr(self.env_cls, "REQUIRES_SINGLE_THREAD_EXECUTOR", False):
            return fn(*args, **kwargs)
        with self.gate:
            if self._single is None:
                self._single = ThreadPoolExecutor(1, thread_name_prefix="openenv-ws-openenv")
        return self._single.submit(fn, *args, **kwargs).result()

    def take(self, env: Holder) -> None:
        """Take the one instance of an environment that is not concurrent for `env`;
        an instance idle for the handover window is taken from its holder.

        Raises:
            InvalidState: (``capacity``) the holder is in a call or was called lately.
        """
        if self.concurrent:
            return
        if threading.current_thread().name == _SPARES_THREAD:
            # A spare would hold the one instance with no session using it, and take it
            # from an idle session for nobody: the warm pool keeps none of it.
            raise InvalidState(
                f"{self.env_cls.__name__} hosts one session at a time: not kept warm",
                code="capacity",
            )
        with self.gate:
            holder = self._holder
            if holder is not None:
                idle = holder.idle_for()
                if self.handover is None or idle is None or idle < self.handover:
                    raise InvalidState(self._taken_message(), code="capacity")
                # Handed over: the holder's next call is refused (OpenEnvEnvironment.call).
                holder.evicted = idle
                released = holder.release_locked()
            else:
                released = None
            self._holder = env
            env.holding = True
        if released is not None:
            close_resources(self, *released)

    def _taken_message(self) -> str:
        after = (
            f"; a session without a request for {self.handover:g} s is handed over"
            if self.handover is not None
            else ""
        )
        return (
            f"{self.env_cls.__name__} does not declare SUPPORTS_CONCURRENT_SESSIONS, so "
            "this server process hosts one session of it at a time and one is in use; "
            f"retry later (openenv-ws serve --workers N hosts N){after}"
        )

    def give(self, env: Holder) -> None:
        """`env` no longer needs the one instance (it closed)."""
        if not self.concurrent:
            with self.gate:
                if self._holder is env:
                    self._holder = None

    def spec(self, env: Any) -> EnvSpec:
        """The spec of the app's sessions (made once, from the first instance)."""
        if self._spec is None:
            state_cls = returned(type(env), "state", core().State)
            meta = env.get_metadata()
            extra: dict[str, Any] = {
                "env": "openenv",
                "name": self.env_cls.__name__,
                "state_schema": state_cls.model_json_schema(),
                "openenv_metadata": wire_value(meta.model_dump(mode="json")),
                "concurrent": self.concurrent,
            }
            self._spec = EnvSpec(
                action=JsonSpec(self.action_cls.model_json_schema(), self.action_cls.__name__),
                observation=JsonSpec(
                    self.observation_cls.model_json_schema(), self.observation_cls.__name__
                ),
                extra=extra,
            )
        return self._spec


def load_app(
    env: Any,
    action_cls: Any = None,
    observation_cls: Any = None,
    *,
    inline: bool = False,
    handover: float | None = DEFAULT_HANDOVER,
) -> OpenEnvApp:
    """An :class:`OpenEnvApp` from the environment class or factory and its model classes
    (`handover`: see :attr:`OpenEnvApp.handover`).

    Each may be the object or a ``module:attr`` string. Without the classes,
    they come from the environment's annotations (``Environment[Act, Obs,
    State]``, or ``step``'s parameter and return types), else from the module
    named by `env` or the class's, or a ``models`` module of a package above
    them (the one Action and Observation subclass there, or the ones named
    after the environment), else, for an ``MCPEnvironment``, openenv-core's
    ``CallToolAction`` and ``CallToolObservation``.

    Raises:
        EnvConfigError: something cannot be imported, is not what it should be,
            or the classes are neither given nor found (both named at once).
    """
    base = core()
    from openenv.core.env_server.types import Action, Observation

    app_module = env.partition(":")[0] if isinstance(env, str) else None
    factory = import_target(env, "the OpenEnv app") if isinstance(env, str) else env
    if not callable(factory):
        raise EnvConfigError(f"{factory!r} is neither an Environment class nor a factory")
    if inspect.isclass(factory):
        if not issubclass(factory, base.Environment):
            raise EnvConfigError(f"{factory.__name__} is not an openenv-core Environment")
        env_cls: type[Any] = factory
    else:
        env_cls = returns(factory, base.Environment)
        if env_cls is base.Environment:  # an unannotated factory: look at one instance
            probe = factory()
            env_cls = type(probe)
            probe.close()
    found_action, found_obs = model_classes(env_cls)
    classes: list[Any] = []
    missing = []
    for given, found, base, what in (
        (action_cls, found_action, Action, "Action"),
        (observation_cls, found_obs, Observation, "Observation"),
    ):
        cls = (
            import_target(given, f"the {what} class") if isinstance(given, str) else given or found
        )
        if cls is None:
            cls = from_models(env_cls, app_module, base, what)
        if cls is None:
            missing.append(what)
        elif not (isinstance(cls, type) and issubclass(cls, base)):
            raise EnvConfigError(f"{cls!r} is not an openenv-core {what} class")
        classes.append(cls)
    if missing:
        flags = " ".join(f"--openenv-{w.lower()} module:{w}Class" for w in missing)
        raise EnvConfigError(
            f"{env_cls.__name__} does not name its {' and '.join(missing)} class"
            f"{'es' if len(missing) > 1 else ''} in its annotations, nor does a models.py "
            f"of its package define one; give {'them' if len(missing) > 1 else 'it'} ({flags})"
        )
    return OpenEnvApp(factory, classes[0], classes[1], env_cls, inline=inline, handover=handover)


class CoroutineLoop:
    """An event loop on a thread of its own, for one environment's coroutines."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="openenv-ws-openenv-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def close_resources(
    app: OpenEnvApp,
    env: Any,
    loop: CoroutineLoop | None,
    stack: contextlib.AsyncExitStack | None,
) -> None:
    """Close an OpenEnv instance and the event loop of its coroutines (if any)."""
    try:
        if loop is not None:
            if stack is not None:
                loop.run(stack.aclose())
            loop.stop()
    finally:
        if env is not None:
            app.run(env.close)
