"""Atari 2600 games (ale-py) for openenv-ws: the server environment and typed client models.

The names below are imported on first use: a client imports no emulator,
and ``openenv-ws`` finds this plugin's commands without loading ale-py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import AsyncAtariEnv, AtariEnv, atari_config
    from .config import games, normalize_config
    from .environment import AtariEnvironment
    from .models import AtariAction, AtariObservation, AtariState
    from .plugin import atari_factory

#: Each public name and the module that defines it.
_HOMES = {
    "AsyncAtariEnv": "client",
    "AtariAction": "models",
    "AtariEnv": "client",
    "AtariEnvironment": "environment",
    "AtariObservation": "models",
    "AtariState": "models",
    "atari_config": "client",
    "atari_factory": "plugin",
    "games": "config",
    "normalize_config": "config",
}

__all__ = [
    "AsyncAtariEnv",
    "AtariAction",
    "AtariEnv",
    "AtariEnvironment",
    "AtariObservation",
    "AtariState",
    "atari_config",
    "atari_factory",
    "games",
    "normalize_config",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'atari' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
