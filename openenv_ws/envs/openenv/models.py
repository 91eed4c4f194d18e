"""Finding what an OpenEnv app is made of: openenv-core, the app's factory, and its
Pydantic Action and Observation classes (from annotations, or its package's ``models.py``)."""

from __future__ import annotations

import importlib
import typing
from typing import Any

from ...errors import EnvConfigError

__all__ = ["core", "from_models", "import_target", "model_classes", "returned", "returns"]


def core() -> Any:
    try:
        from openenv.core.env_server import interfaces
    except ImportError as exc:
        raise EnvConfigError(
            "serving OpenEnv environments needs openenv-core: pip install 'openenv-ws[compat]' "
            f"({exc})"
        ) from None
    return interfaces


def import_target(target: str, what: str) -> Any:
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


def returns(fn: Any, base: type[Any]) -> type[Any]:
    """The class `fn` is annotated to return, if a `base` (else `base`)."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - no or unresolvable annotations: fall back
        hint = None
    return hint if isinstance(hint, type) and issubclass(hint, base) else base


def returned(owner: Any, name: str, base: type[Any]) -> type[Any]:
    """The class `owner.name` (a method or property) is annotated to return, if a `base`."""
    member = getattr(owner, name, None)
    if isinstance(member, property):
        member = member.fget
    return base if member is None else returns(member, base)


def generic_args(env_cls: type[Any]) -> tuple[Any, ...]:
    """The ``Environment[Act, Obs, State]`` arguments of `env_cls`, if it names them."""
    base = core().Environment
    for klass in env_cls.__mro__:
        for orig in getattr(klass, "__orig_bases__", ()):
            origin = typing.get_origin(orig)
            if isinstance(origin, type) and issubclass(origin, base):
                args = typing.get_args(orig)
                if args and all(isinstance(a, type) for a in args[:2]):
                    return args
    return ()


def model_classes(env_cls: type[Any]) -> tuple[type[Any] | None, type[Any] | None]:
    from openenv.core.env_server.types import Action, Observation

    args = generic_args(env_cls)
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
    obs = returned(env_cls, "step", Observation)
    return action, (obs if obs is not Observation else None)


def model_modules(env_cls: type[Any], app_module: str | None) -> list[Any]:
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


def pick(candidates: list[type[Any]], env_cls: type[Any], what: str) -> type[Any] | None:
    """The one model class among `candidates`, or the one named after the environment
    (``EchoEnvironment``: ``EchoAction``); None when that does not decide."""
    unique = list(dict.fromkeys(candidates))
    if len(unique) == 1:
        return unique[0]
    stem = env_cls.__name__.removesuffix("Environment").removesuffix("Env")
    named = [c for c in unique if c.__name__ == f"{stem}{what}"]
    return named[0] if len(named) == 1 else None


def from_models(
    env_cls: type[Any], app_module: str | None, base: type[Any], what: str
) -> type[Any] | None:
    """The `base` subclass the modules of :func:`model_modules` define (or, failing
    that, import) for `env_cls`; for an MCP environment, openenv-core's MCP model."""
    for module in model_modules(env_cls, app_module):
        found = [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, base) and v is not base
        ]
        own = [v for v in found if v.__module__ == module.__name__]
        cls = pick(own, env_cls, what) if own else pick(found, env_cls, what)
        if cls is not None:
            return cls
    from openenv.core.env_server import mcp_environment, mcp_types

    if issubclass(env_cls, mcp_environment.MCPEnvironment):
        mcp_cls: type[Any] = getattr(mcp_types, f"CallTool{what}")
        return mcp_cls
    return None
