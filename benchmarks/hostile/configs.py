"""The configs of the heavy and the largest phases, drawn from the Atari bounds.

Each phase gets a list, the config it means first, then smaller ones: the
attacker takes the first the server accepts (a bound lower than the one
read here refuses the first with ``bad_config``), and the report names it.
Bounds missing from this build's :mod:`atari.config` take the values they
had when these phases were written.
"""

from __future__ import annotations

from typing import Any

import atari.config as atari_config
import openenv_ws.environment as environment
from openenv_ws.server.limits import ServerLimits

__all__ = [
    "heavy_configs",
    "largest_configs",
    "largest_vector_configs",
    "max_envs",
    "max_sessions",
]

_SIDE = int(getattr(atari_config, "MAX_IMAGE_SIDE", 1024))
_STACK = int(getattr(atari_config, "MAX_STACK", 16))
_NOOPS = int(getattr(atari_config, "MAX_NOOPS", 1000))
_OBS_BYTES = int(getattr(atari_config, "MAX_OBS_BYTES", 16 << 20))
_BATCH_BYTES = int(getattr(environment, "MAX_BATCH_OBS_BYTES", 256 << 20))
_CHANNELS = {"grayscale": 1, "rgb": 3}


def max_envs() -> int:
    """The most envs of one vector session a server with the default limits admits."""
    return ServerLimits().max_envs


def max_sessions() -> int:
    """The sessions a server with the default limits hosts at once (``--max-sessions``)."""
    return ServerLimits().max_sessions


def _smaller(first: dict[str, Any], count: int = 8) -> list[dict[str, Any]]:
    """`first`, then its stack halved down to 1, then its sides halved (at most `count`)."""
    configs = [first]
    config = dict(first)
    while len(configs) < count and (config["stack_num"] > 1 or config["img_height"] > 84):
        if config["stack_num"] > 1:
            config = {**config, "stack_num": config["stack_num"] // 2}
        else:
            side = max(84, config["img_height"] // 2)
            config = {**config, "img_height": side, "img_width": side}
        configs.append(config)
    return configs


def heavy_configs() -> list[dict[str, Any]]:
    """Grayscale 1024x1024, a stack of 16, up to 1,000 no-ops per reset (or the bounds' most)."""
    side, stack = min(1024, _SIDE), min(16, _STACK)
    while stack > 1 and side * side * stack > _OBS_BYTES:
        stack //= 2
    first = {
        "game": "pong",
        "obs_type": "grayscale",
        "img_height": side,
        "img_width": side,
        "stack_num": stack,
        "noop_max": min(1000, _NOOPS),
    }
    return _smaller(first)


def largest_configs(obs_bytes: int | None = None) -> list[dict[str, Any]]:
    """The screen config with the largest observation the bounds admit, at most `obs_bytes`
    (default: the bound of one observation), max-pooling (a buffer more); then smaller ones."""
    limit = min(_OBS_BYTES, obs_bytes or _OBS_BYTES)
    best: tuple[int, dict[str, Any]] | None = None
    for obs_type, channels in _CHANNELS.items():
        side = _SIDE
        while side > 1 and side * side * channels > limit:
            side //= 2
        stack = min(_STACK, limit // (side * side * channels))
        size = side * side * channels * stack
        config = {
            "game": "pong",
            "obs_type": obs_type,
            "img_height": side,
            "img_width": side,
            "stack_num": stack,
            "maxpool": True,
        }
        if best is None or size > best[0]:
            best = (size, config)
    assert best is not None
    return _smaller(best[1])


def largest_vector_configs(num_envs: int) -> list[dict[str, Any]]:
    """The largest configs for a vector session of `num_envs` envs (its batch has a bound)."""
    return largest_configs(_BATCH_BYTES // max(1, num_envs))
