"""Atari 2600 games (ale-py) for openenv-ws: the server environment and typed client models."""

from __future__ import annotations

from .client import AsyncAtariEnv, AtariEnv, atari_config
from .environment import AtariEnvironment, atari_factory, games, normalize_config
from .models import AtariAction, AtariObservation, AtariState

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
