"""OpenEnv environments served unchanged, as an openenv-ws environment plugin (entry point ``openenv``).

Point the server at what an OpenEnv ``app.py`` passes to openenv-core's
``create_app(env_factory, ActionCls, ObservationCls)``::

    openenv-ws serve --env openenv --openenv-app my_env.server.env:EchoEnvironment
    # the classes, when neither its annotations nor its package's models.py name them:
    #   --openenv-action my_env.models:EchoAction --openenv-observation my_env.models:EchoObservation

(the options set the environment variables :data:`APP_ENV`, :data:`ACTION_ENV`
and :data:`OBSERVATION_ENV`, which is how worker processes get them);
:func:`openenv_plugin` does the same in Python. The session config is empty:
the server decides which code runs, never a client.

Each session gets its own instance of the environment. Its spaces are
:class:`~openenv_ws.spaces.JsonSpec`: the JSON schemas of the Action and
Observation models, named by class; ``spec.extra`` holds ``state_schema`` and
``openenv_metadata`` (the environment's ``get_metadata()``).

- An action is a map validated into the Action model (openenv-core's
  ``deserialize_action``, so ``{"type": "call_tool", ...}`` and
  ``{"type": "list_tools"}`` reach an MCP environment); a map the model
  refuses is ``invalid_action`` naming the fields, the session goes on.
- An observation is the model's dump without ``done`` and ``metadata``
  (``reward`` stays, None included, so the dump is the model's own); the
  result's reward is the Observation's (0.0 for None), ``terminated`` its
  ``done``, ``info`` its ``metadata``.
- An environment whose class does not set ``SUPPORTS_CONCURRENT_SESSIONS``
  gets one session at a time per server process: a second ``open`` meanwhile
  is refused with ``capacity`` (retry later; ``serve --workers N`` gives N),
  unless the session holding it has had no call for the handover window
  (``--openenv-handover`` / :data:`HANDOVER_ENV`, default
  :data:`DEFAULT_HANDOVER` s): then the newcomer gets the environment and the
  idle session's next request gets ``idle_timeout`` (a stray ``POST /reset``
  does not lock the environment for the HTTP session TTL).
  OpenEnv's ``GET /schema`` and ``/metadata`` read the spec of a built instance
  (until an OpenEnv client opened a session): meanwhile they say ``capacity`` too.
- Calls run on the session's worker thread under the server's per-call
  deadline, never on the event loop (``--openenv-inline`` / :data:`INLINE_ENV`
  says the environment's calls are short enough to run inline). An
  environment that overrides ``reset_async`` or ``step_async`` (MCP
  environments do), or offers ``mcp_session``, gets an event loop of its own
  on a thread of its own, where its coroutines run and its MCP session stays
  open for the session's lifetime: however it awaits, no other session waits.
  An environment that sets ``REQUIRES_SINGLE_THREAD_EXECUTOR`` (thread-bound
  libraries) is built, called and closed on one thread shared by all its
  instances, as openenv-core's server does: its sessions' calls take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import importlib
import inspect
import os
import threading
import time
import typing
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..environment import Environment, EnvResult, EnvSpec, check_keys
from ..errors import EnvConfigError, InvalidAction, InvalidState
from ..registry import EnvPlugin
from ..spaces import JsonSpec

__all__ = [
    "ACTION_ENV",
    "APP_ENV",
    "DEFAULT_HANDOVER",
    "HANDOVER_ENV",
    "INLINE_ENV",
    "OBSERVATION_ENV",
    "OpenEnvApp",
    "OpenEnvEnvironment",
    "load_app",
    "openenv_factory",
    "openenv_plugin",
]

#: Environment variable: ``module:attr`` of the environment class or factory to serve.
APP_ENV = "OPENENV_WS_OPENENV_APP"
#: Environment variable: ``module:attr`` of its Action class (default: found, see :func:`load_app`).
ACTION_ENV = "OPENENV_WS_OPENENV_ACTION"
#: Environment variable: ``module:attr`` of its Observation class (default: found, see :func:`load_app`).
OBSERVATION_ENV = "OPENENV_WS_OPENENV_OBSERVATION"
#: Environment variable: ``1`` when the environment's calls may run on the event loop.
INLINE_ENV = "OPENENV_WS_OPENENV_INLINE"
#: Environment variable: the handover window in seconds (``0``: never hand over).
HANDOVER_ENV = "OPENENV_WS_OPENENV_HANDOVER"
#: Seconds without a call after which the one session of an environment that is not
#: concurrent is handed to a newcomer asking for it.
DEFAULT_HANDOVER = 10.0

#: The name of the warm pool's thread, which builds spares (openenv_ws.server.runtime.pool).
_SPARES_THREAD = "openenv-ws-warm-pool"

#: Longest message a validation error gives (a hostile action may be huge).
_MAX_WHY = 600


def _core() -> Any:
    try:
        from openenv.core.env_server import interfaces
    except ImportError as exc:
        raise EnvConfigError(
            "serving OpenEnv environments needs openenv-core: pip install 'openenv-ws[compat]' "
            f"({exc})"
        ) from None
    return interfaces


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
    _gate: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _holder: OpenEnvEnvironment | None = field(default=None, repr=False)
    _single: ThreadPoolExecutor | None = field(default=None, repr=False)

    @property
    def concurrent(self) -> bool:
        return bool(getattr(self.env_cls, "SUPPORTS_CONCURRENT_SESSIONS", False))

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``; for an environment that sets
        ``REQUIRES_SINGLE_THREAD_EXECUTOR``, on the one thread all its instances use."""
        if not getattr(self.env_cls, "REQUIRES_SINGLE_THREAD_EXECUTOR", False):
            return fn(*args, **kwargs)
        with self._gate:
            if self._single is None:
                self._single = ThreadPoolExecutor(1, thread_name_prefix="openenv-ws-openenv")
        return self._single.submit(fn, *args, **kwargs).result()

    def take(self, env: OpenEnvEnvironment) -> None:
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
        with self._gate:
            holder = self._holder
            if holder is not None:
                idle = holder.idle_for()
                if self.handover is None or idle is None or idle < self.handover:
                    raise InvalidState(self._taken_message(), code="capacity")
                # Handed over: the holder's next call is refused (OpenEnvEnvironment._call).
                holder.evicted = idle
                released = holder.release_locked()
            else:
                released = None
            self._holder = env
            env._holding = True
        if released is not None:
            _close_resources(self, *released)

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

    def give(self, env: OpenEnvEnvironment) -> None:
        """`env` no longer needs the one instance (it closed)."""
        if not self.concurrent:
            with self._gate:
                if self._holder is env:
                    self._holder = None

    def spec(self, env: Any) -> EnvSpec:
        """The spec of the app's sessions (made once, from the first instance)."""
        if self._spec is None:
            state_cls = _returned(type(env), "state", _core().State)
            meta = env.get_metadata()
            extra: dict[str, Any] = {
                "env": "openenv",
                "name": self.env_cls.__name__,
                "state_schema": state_cls.model_json_schema(),
                "openenv_metadata": _wire(meta.model_dump(mode="json")),
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


def _import(target: str, what: str) -> Any:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise EnvConfigError(f"{what} {target!r} is not 'package.module:attribute'")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise EnvConfigError(f"{what} {target!r} cannot be imported: {exc}") from None
    return found


def _returns(fn: Any, base: type[Any]) -> type[Any]:
    """The class `fn` is annotated to return, if a `base` (else `base`)."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - no or unresolvable annotations: fall back
        hint = None
    return hint if isinstance(hint, type) and issubclass(hint, base) else base


def _returned(owner: Any, name: str, base: type[Any]) -> type[Any]:
    """The class `owner.name` (a method or property) is annotated to return, if a `base`."""
    member = getattr(owner, name, None)
    if isinstance(member, property):
        member = member.fget
    return base if member is None else _returns(member, base)


def _generic_args(env_cls: type[Any]) -> tuple[Any, ...]:
    """The ``Environment[Act, Obs, State]`` arguments of `env_cls`, if it names them."""
    base = _core().Environment
    for klass in env_cls.__mro__:
        for orig in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(orig)
            if isinstance(origin, type) and issubclass(origin, base):
                args = typing.get_args(orig)
                if args and all(isinstance(a, type) for a in args[:2]):
                    return args
    return ()


def _model_classes(env_cls: type[Any]) -> tuple[type[Any] | None, type[Any] | None]:
    from openenv.core.env_server.types import Action, Observation

    args = _generic_args(env_cls)
    if len(args) >= 2 and issubclass(args[0], Action) and issubclass(args[1], Observation):
        return args[0], args[1]
    action = None
    try:
        hints = typing.get_type_hints(env_cls.step)
    except Exception:  # noqa: BLE001 - unresolvable annotations: ask for the classes
        hints = {}
    hint = hints.get("action")
    if isinstance(hint, type) and issubclass(hint, Action) and hint is not Action:
        action = hint
    obs = _returned(env_cls, "step", Observation)
    return action, (obs if obs is not Observation else None)


def _model_modules(env_cls: type[Any], app_module: str | None) -> list[Any]:
    """The modules that may hold `env_cls`'s models, nearest first: the app's module,
    the class's module, then ``models`` of each package above them (OpenEnv's env
    packages keep them in ``<env>/models.py``, the class in ``<env>/server/``)."""
    names: list[str] = []
    for start in (app_module, env_cls.__module__):
        if not start:
            continue
        names.append(start)
        parts = start.split(".")
        names.extend(".".join([*parts[:i], "models"]) for i in range(len(parts) - 1, 0, -1))
    modules = []
    for name in dict.fromkeys(names):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    return modules


def _pick(candidates: list[type[Any]], env_cls: type[Any], what: str) -> type[Any] | None:
    """The one model class among `candidates`, or the one named after the environment
    (``EchoEnvironment``: ``EchoAction``); None when that does not decide."""
    unique = list(dict.fromkeys(candidates))
    if len(unique) == 1:
        return unique[0]
    stem = env_cls.__name__.removesuffix("Environment").removesuffix("Env")
    named = [c for c in unique if c.__name__ == f"{stem}{what}"]
    return named[0] if len(named) == 1 else None


def _from_models(
    env_cls: type[Any], app_module: str | None, base: type[Any], what: str
) -> type[Any] | None:
    """The `base` subclass the modules of :func:`_model_modules` define (or, failing
    that, import) for `env_cls`; for an MCP environment, openenv-core's MCP model."""
    for module in _model_modules(env_cls, app_module):
        found = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, base) and v is not base
        ]
        own = [v for v in found if v.__module__ == module.__name__]
        cls = _pick(own, env_cls, what) if own else _pick(found, env_cls, what)
        if cls is not None:
            return cls
    from openenv.core.env_server import mcp_environment, mcp_types

    if issubclass(env_cls, mcp_environment.MCPEnvironment):
        mcp_cls: type[Any] = getattr(mcp_types, f"CallTool{what}")
        return mcp_cls
    return None


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
    core = _core()
    from openenv.core.env_server.types import Action, Observation

    app_module = env.partition(":")[0] if isinstance(env, str) else None
    factory = _import(env, "the OpenEnv app") if isinstance(env, str) else env
    if not callable(factory):
        raise EnvConfigError(f"{factory!r} is neither an Environment class nor a factory")
    if inspect.isclass(factory):
        if not issubclass(factory, core.Environment):
            raise EnvConfigError(f"{factory.__name__} is not an openenv-core Environment")
        env_cls: type[Any] = factory
    else:
        env_cls = _returns(factory, core.Environment)
        if env_cls is core.Environment:  # an unannotated factory: look at one instance
            probe = factory()
            env_cls = type(probe)
            probe.close()
    found_action, found_obs = _model_classes(env_cls)
    classes: list[Any] = []
    missing = []
    for given, found, base, what in (
        (action_cls, found_action, Action, "Action"),
        (observation_cls, found_obs, Observation, "Observation"),
    ):
        cls = _import(given, f"the {what} class") if isinstance(given, str) else given or found
        if cls is None:
            cls = _from_models(env_cls, app_module, base, what)
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


class _Loop:
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


def _overrides(env: Any, name: str) -> bool:
    base = getattr(_core().Environment, name)
    return getattr(type(env), name, base) is not base


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments `fn` takes (all of them if it takes ``**kwargs``), as
    openenv-core's server passes them."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


_UNSET = object()


#: Values that are section 22 values as they are.
_AS_IS = frozenset({type(None), bool, int, float, str, bytes, np.ndarray})


def _wire(value: Any) -> Any:
    """`value` as section 22 values: tuples as lists, numpy scalars and enums as their
    values; :data:`_UNSET` for anything else (then the JSON dump is used)."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    if kind is dict:
        return _wire_items(value, value)
    if kind is list or kind is tuple:
        items = [v if type(v) in _AS_IS else _wire(v) for v in value]
        return _UNSET if any(i is _UNSET for i in items) else items
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, enum.Enum):
        return _wire(value.value)
    return _UNSET


def _wire_items(values: Mapping[Any, Any], keys: Any) -> Any:
    """``{k: _wire(values[k]) for k in keys}`` (keys strings), or :data:`_UNSET`."""
    out = {}
    for k in keys:
        v = values[k]
        if type(v) not in _AS_IS:
            v = _wire(v)
            if v is _UNSET:
                return _UNSET
        if type(k) is not str:
            return _UNSET
        out[k] = v
    return out


@functools.lru_cache(maxsize=256)
def _stored_fields(cls: Any, exclude: frozenset[str]) -> tuple[tuple[str, ...], int] | None:
    """(the fields to dump, how many fields it has) of the Pydantic model class `cls` if its
    ``model_dump`` is its stored field values, in order (no serializer, computed
    field, excluded field or extra field changes what it dumps); None otherwise."""
    from annotated_types import BaseMetadata

    decorators = getattr(cls, "__pydantic_decorators__", None)
    fields = getattr(cls, "model_fields", None)
    if (
        decorators is None
        or type(fields) is not dict
        or decorators.field_serializers
        or decorators.model_serializers
        or getattr(cls, "model_computed_fields", None)
        or cls.model_config.get("extra") == "allow"
        or getattr(cls, "__pydantic_root_model__", False)
    ):
        return None
    for info in fields.values():
        if info.exclude or not all(isinstance(m, BaseMetadata) for m in info.metadata):
            return None
    return tuple(k for k in fields if k not in exclude), len(fields)


def _dump(model: Any, exclude: frozenset[str] = frozenset()) -> Any:
    """`model`'s ``model_dump`` as section 22 values (its JSON dump where it holds
    anything else); a plain model's stored values are read as they are."""
    names = _stored_fields(model.__class__, exclude)
    if names is not None:
        stored = model.__dict__
        if len(stored) == names[1]:
            out = _wire_items(stored, names[0])
            if out is not _UNSET:
                return out
    out = _wire(model.model_dump(exclude=set(exclude)))
    return model.model_dump(mode="json", exclude=set(exclude)) if out is _UNSET else out


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
        self._loop: _Loop | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._env: Any = None
        # Calls in progress (the build counts as one) and when the last one ended
        # (monotonic s); both under the app's gate.
        self._calls = 1
        self._last = time.monotonic()
        #: Seconds it had been idle when its environment was handed to another session.
        self.evicted: float | None = None
        self._holding = False  # holds the one instance of an app that is not concurrent
        app.take(self)
        try:
            self._env = app.run(app.factory)
            self._spec: EnvSpec = app.run(app.spec, self._env)
            self._async_reset = _overrides(self._env, "reset_async")
            self._async_step = _overrides(self._env, "step_async")
            mcp_session = getattr(self._env, "mcp_session", None)
            if self._async_reset or self._async_step or callable(mcp_session):
                self._loop = _Loop()
                if callable(mcp_session):
                    self._stack = self._loop.run(_enter(mcp_session))
        except BaseException:
            self.close()
            raise
        finally:
            with app._gate:
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
        gate = self._app._gate
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

    def release_locked(self) -> tuple[Any, _Loop | None, contextlib.AsyncExitStack | None]:
        """Give up the OpenEnv instance (and its loop): returned for the caller to close
        outside the app's gate, which the caller holds."""
        released = (self._env, self._loop, self._stack)
        self._env = self._loop = self._stack = None
        self._holding = False
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
        info = _wire(observation.metadata)
        return EnvResult(
            _dump(observation, _UNSENT),
            0.0 if reward is None else float(reward),
            bool(observation.done),
            False,
            info if type(info) is dict else {"metadata": _jsonable(observation.metadata)},
        )

    def state(self) -> dict[str, Any]:
        with self._call():
            state = self._app.run(getattr, self._env, "state")
        out = _dump(state) if hasattr(state, "model_dump") else _wire(dict(state or {}))
        if type(out) is not dict:
            raise TypeError(f"{type(self._env).__name__}.state cannot be sent")
        return out

    def close(self) -> None:
        app = self._app
        with app._gate:
            holding = self._holding
            released = self.release_locked()
        try:
            _close_resources(app, *released)
        finally:
            if holding:
                app.give(self)


def _close_resources(
    app: OpenEnvApp,
    env: Any,
    loop: _Loop | None,
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


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))


async def _enter(mcp_session: Callable[[], Any]) -> contextlib.AsyncExitStack:
    stack = contextlib.AsyncExitStack()
    await stack.enter_async_context(mcp_session())
    return stack


def openenv_plugin(
    env: Any,
    action_cls: Any = None,
    observation_cls: Any = None,
    *,
    inline: bool = False,
    handover: float | None = DEFAULT_HANDOVER,
) -> EnvPlugin[OpenEnvEnvironment]:
    """A plugin serving an OpenEnv environment, for ``create_app`` (see :func:`load_app`)."""
    app = load_app(env, action_cls, observation_cls, inline=inline, handover=handover)

    def factory(config: dict[str, Any]) -> OpenEnvEnvironment:
        check_keys(config, (), "OpenEnv session")
        return OpenEnvEnvironment(app)

    return EnvPlugin(factory, build_off_loop=True)


_loaded: dict[tuple[str, str, str, bool, float | None], OpenEnvApp] = {}


def handover_from_env() -> float | None:
    """The handover window :data:`HANDOVER_ENV` sets (default :data:`DEFAULT_HANDOVER`;
    ``0``: None, never hand over)."""
    text = os.environ.get(HANDOVER_ENV, "")
    if not text:
        return DEFAULT_HANDOVER
    try:
        seconds = float(text)
    except ValueError:
        raise EnvConfigError(f"{HANDOVER_ENV} must be seconds, got {text[:40]!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise EnvConfigError(f"{HANDOVER_ENV} must be finite seconds >= 0, got {text[:40]!r}")
    return seconds or None


_loading = threading.Lock()


def openenv_factory(config: dict[str, Any]) -> OpenEnvEnvironment:
    """The ``openenv`` entry point: serves the app named by :data:`APP_ENV`."""
    target = os.environ.get(APP_ENV, "")
    if not target:
        raise EnvConfigError(
            f"no OpenEnv app to serve: start the server with --openenv-app module:EnvClass "
            f"(or set {APP_ENV})"
        )
    check_keys(config, (), "OpenEnv session")
    key = (
        target,
        os.environ.get(ACTION_ENV, ""),
        os.environ.get(OBSERVATION_ENV, ""),
        os.environ.get(INLINE_ENV, "") == "1",
        handover_from_env(),
    )
    with _loading:
        app = _loaded.get(key)
        if app is None:
            app = _loaded[key] = load_app(
                key[0], key[1] or None, key[2] or None, inline=key[3], handover=key[4]
            )
    return OpenEnvEnvironment(app)
