"""Environments and commands that other packages plug in, found by entry point.

A package offers an environment to ``openenv-ws serve --env NAME`` (and to
the Ray provider) by declaring an entry point in the group
:data:`ENV_GROUP`, e.g. in its ``pyproject.toml``::

    [project.entry-points."openenv_ws.environments"]
    mygame = "mygame.server:factory"

The object named is an :data:`~openenv_ws.environment.EnvFactory`, or an
:class:`EnvPlugin` that also says what the runtime may ask of the
environment without building one (check a config, configs to keep warm, what
the web page offers). ``--env module:attr`` names such an object directly.

Extra subcommands of ``openenv-ws`` (the Atari plugin's ``demo`` and
``games``) are :class:`Command` objects in the group :data:`COMMAND_GROUP`.

The runtime imports no environment package itself: a plugin is imported
only when its name is asked for.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from .environment import EnvFactory, Environment, VectorFactory
from .errors import EnvConfigError
from .footprint import FootprintFunction

__all__ = [
    "COMMAND_GROUP",
    "DEFAULT_ENV",
    "ENV_GROUP",
    "Command",
    "EnvPlugin",
    "as_plugin",
    "command_entry_points",
    "env_names",
    "load_env",
]

#: Entry point group of environments (name -> factory or :class:`EnvPlugin`).
ENV_GROUP = "openenv_ws.environments"
#: Entry point group of extra ``openenv-ws`` subcommands (name -> :class:`Command`).
COMMAND_GROUP = "openenv_ws.commands"
#: The environment ``openenv-ws serve`` and the providers host unless told otherwise.
DEFAULT_ENV = "atari"

E = TypeVar("E", bound=Environment, covariant=True)


@dataclass(frozen=True)
class EnvPlugin(Generic[E]):
    """An environment factory and what the runtime may ask of it without building one.

    Calling the plugin calls its factory, so a plugin is an
    :data:`~openenv_ws.environment.EnvFactory` wherever one is expected.

    Attributes:
        factory: makes one environment from a session's ``open`` config.
        normalize: checks a config and returns the effective one, raising
            :class:`~openenv_ws.errors.EnvConfigError` for a config the factory
            would refuse; configs that normalize equal build interchangeable
            environments (the warm pool shares them). None: configs are
            checked only by building.
        warm: configs to keep warm when the server is given none.
        shared_secrets: environment variables that must hold the same secret
            in every worker process of one server (e.g. a key that signs
            snapshots); ``serve --workers N`` sets each one that is unset to a
            random value before starting the workers.
        choices: what the web page offers in its ``open`` config (keys
            ``env``, ``games``, ``obs_types``, ``defaults``); None: nothing,
            the page sends the config the user types.
        vector: makes the environments of a vector session (an ``open`` with
            ``num_envs``, SPEC section 21) from its config, ``num_envs`` and
            ``batch_size``; None: the server steps ``num_envs`` instances of
            :attr:`factory` in turn (synchronous sessions only).
        build_off_loop: build each session's environment on its worker thread
            (a few at once, not paced), so other sessions keep stepping while a slow
            constructor runs; False for builds that hold the GIL throughout
            (an ale-py ROM load), where a thread gains nothing.
        footprint: what a session of a config takes (memory, engine threads),
            computed without building it (:mod:`openenv_ws.footprint`); the
            server admits sessions against its budgets with it. None: each
            session (each env of a vector session) is charged
            :data:`~openenv_ws.footprint.DEFAULT_FOOTPRINT`.
    """

    factory: Callable[[dict[str, Any]], E]
    normalize: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    warm: tuple[Mapping[str, Any], ...] = ()
    shared_secrets: tuple[str, ...] = ()
    choices: Callable[[], Mapping[str, Any]] | None = None
    vector: VectorFactory | None = None
    build_off_loop: bool = False
    footprint: FootprintFunction | None = None

    def __call__(self, config: dict[str, Any]) -> E:
        return self.factory(config)


@dataclass(frozen=True)
class Command:
    """An ``openenv-ws`` subcommand a plugin adds.

    Attributes:
        help: one line for ``openenv-ws --help``.
        add_arguments: adds the command's options to its parser.
        run: runs the command with the parsed arguments; returns the exit code.
    """

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def as_plugin(found: Any) -> EnvPlugin[Environment]:
    """`found` as an :class:`EnvPlugin` (a bare factory gets no extras)."""
    if isinstance(found, EnvPlugin):
        return found
    if not callable(found):
        raise EnvConfigError(
            f"{found!r} is neither an environment factory nor an EnvPlugin; "
            "name a callable that takes a config map"
        )
    factory: EnvFactory = found
    return EnvPlugin(factory, build_off_loop=True)


def _entry_points(group: str) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=group)}


def env_names() -> list[str]:
    """The names of the installed environments, sorted (their packages are not imported)."""
    return sorted(_entry_points(ENV_GROUP))


def load_env(spec: str) -> EnvPlugin[Environment]:
    """The environment `spec` names: an installed one (``"atari"``) or ``"module:attr"``.

    Raises:
        EnvConfigError: no such environment, or it cannot be imported (the
            message says which and why).
    """
    module_name, colon, attr = spec.partition(":")
    if colon:
        if not module_name or not attr:
            raise EnvConfigError(f"{spec!r} is not of the form module:attr")
        try:
            found = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise EnvConfigError(f"{spec!r} cannot be imported: {exc}") from None
        return as_plugin(found)
    entry = _entry_points(ENV_GROUP).get(spec)
    if entry is None:
        known = ", ".join(env_names()) or "none"
        raise EnvConfigError(
            f"no environment named {spec!r} is installed (installed: {known}); "
            "name one of them or module:factory"
        )
    try:
        return as_plugin(entry.load())
    except (ImportError, AttributeError) as exc:
        raise EnvConfigError(
            f"environment {spec!r} ({entry.value}) cannot be imported: {exc}"
        ) from None


def command_entry_points() -> dict[str, EntryPoint]:
    """The installed plugin subcommands by name, not loaded yet."""
    return _entry_points(COMMAND_GROUP)
