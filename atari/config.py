"""Atari session configs: the options, their defaults and bounds, and the check.

:func:`normalize_config` turns any config a client sends into the effective
one (every option, plain values) or raises
:class:`~openenv_ws.errors.EnvConfigError` naming the option and what it
accepts. Equal effective configs make interchangeable environments.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from ale_py import roms

from openenv_ws.brief import brief, brief_keys
from openenv_ws.errors import EnvConfigError

__all__ = [
    "DEFAULT_CONFIG",
    "MAX_FRAMES",
    "MAX_FRAMESKIP",
    "MAX_GAME_NAME",
    "OBS_TYPES",
    "games",
    "normalize_config",
]

#: Every option an Atari session accepts, with its default (those of ``ALE/<Game>-v5``).
DEFAULT_CONFIG: Mapping[str, Any] = {
    "game": "pong",
    "obs_type": "rgb",
    "frameskip": 4,
    "repeat_action_probability": 0.25,
    "full_action_space": False,
    "mode": None,
    "difficulty": None,
    "max_episode_steps": None,
    "max_num_frames_per_episode": 108_000,
}

#: Most emulator frames one agent step may run (``frameskip``, or a pair's ``high - 1``):
#: a step holds the event loop for about 43 us a frame, so 64 frames is about 3 ms.
MAX_FRAMESKIP = 64
#: Largest ``max_num_frames_per_episode`` and ``max_episode_steps`` (ALE's counters are C ints).
MAX_FRAMES = 2**31 - 1
#: Longest ``game`` string accepted, in characters.
MAX_GAME_NAME = 64

#: The observation types, as ``obs_type`` names them.
OBS_TYPES = ("rgb", "grayscale", "ram")
# Bundled ROMs that only run in ALE's multi-player mode; ale-py registers no v5 env for them.
_MULTIPLAYER_ONLY = frozenset({"combat", "joust", "maze_craze", "warlords"})


def games() -> list[str]:
    """The ids of the bundled games a session can open, sorted (e.g. ``"pong"``)."""
    return sorted(set(roms.get_all_rom_ids()) - _MULTIPLAYER_ONLY)


def _squash(name: str) -> str:
    return name.replace("_", "").lower()


_BY_SQUASHED: dict[str, str] = {_squash(g): g for g in games()}
_GYM_ID = re.compile(r"(?:ALE/)?(?P<name>[A-Za-z0-9_]+?)(?:-v\d+)?")


def _game_id(value: Any) -> str:
    if type(value) is not str or len(value) > MAX_GAME_NAME:
        raise EnvConfigError(
            f"option 'game' must be a string of at most {MAX_GAME_NAME} characters "
            f"such as 'pong', got {brief(value)}"
        )
    match = _GYM_ID.fullmatch(value.strip())
    found = _BY_SQUASHED.get(_squash(match["name"])) if match else None
    if found is not None:
        return found
    if match and match["name"].lower() in _MULTIPLAYER_ONLY:
        raise EnvConfigError(
            f"option 'game': {brief(value)} is a multi-player-only ROM that ALE cannot run "
            "single-player; choose another game"
        )
    close = difflib.get_close_matches(_squash(value), list(_BY_SQUASHED), n=3, cutoff=0.6)
    hint = (
        f"did you mean {', '.join(repr(_BY_SQUASHED[c]) for c in close)}?"
        if close
        else "see atari.games() or `openenv-ws games` for the list"
    )
    raise EnvConfigError(f"option 'game': unknown game {brief(value)}; {hint}")


def _int_or_none(
    config: Mapping[str, Any], key: str, *, minimum: int, maximum: int = MAX_FRAMES
) -> int | None:
    value = config[key]
    if value is None:
        return None
    if type(value) is not int or not minimum <= value <= maximum:
        raise EnvConfigError(
            f"option {key!r} must be an integer >= {minimum} and <= {maximum} "
            f"({minimum}..{maximum}) or null, got {brief(value)}"
        )
    return value


def _frameskip(value: Any) -> int | list[int]:
    if type(value) is int and 0 < value <= MAX_FRAMESKIP:
        return value
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(type(v) is int for v in value)
        and 0 < value[0] < value[1] <= MAX_FRAMESKIP + 1
    ):
        return [value[0], value[1]]
    raise EnvConfigError(
        f"option 'frameskip' must be a positive integer up to {MAX_FRAMESKIP} (1..{MAX_FRAMESKIP}) "
        "or a pair [low, high] "
        f"with 0 < low < high <= {MAX_FRAMESKIP + 1} (frames drawn uniformly from "
        f"low..high-1), got {brief(value)}"
    )


def normalize_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check an Atari config and return the effective one (every option, plain values).

    Only ``mode`` and ``difficulty`` are left unchecked: their allowed values
    depend on the game, so :class:`AtariEnvironment` checks them once the ROM
    is loaded. Equal effective configs make interchangeable environments.

    Raises:
        EnvConfigError: an unknown option or a bad value; the message names both.
    """
    config = dict(config or {})
    unknown = sorted(set(config) - set(DEFAULT_CONFIG))
    if unknown:
        raise EnvConfigError(
            f"unknown Atari option(s) {brief_keys(unknown)}; "
            f"known options: {', '.join(DEFAULT_CONFIG)}"
        )
    merged = {**DEFAULT_CONFIG, **config}
    obs_type = merged["obs_type"]
    if obs_type not in OBS_TYPES or type(obs_type) is not str:
        raise EnvConfigError(
            f"option 'obs_type' must be one of {', '.join(OBS_TYPES)}, got {brief(obs_type)}"
        )
    rap = merged["repeat_action_probability"]
    if type(rap) not in (int, float) or not 0.0 <= rap <= 1.0:
        raise EnvConfigError(
            f"option 'repeat_action_probability' must be a number in [0, 1], got {brief(rap)}"
        )
    if type(merged["full_action_space"]) is not bool:
        raise EnvConfigError(
            "option 'full_action_space' must be true or false, "
            f"got {brief(merged['full_action_space'])}"
        )
    return {
        "game": _game_id(merged["game"]),
        "obs_type": obs_type,
        "frameskip": _frameskip(merged["frameskip"]),
        "repeat_action_probability": float(rap),
        "full_action_space": merged["full_action_space"],
        "mode": _int_or_none(merged, "mode", minimum=0),
        "difficulty": _int_or_none(merged, "difficulty", minimum=0),
        "max_episode_steps": _int_or_none(merged, "max_episode_steps", minimum=1),
        "max_num_frames_per_episode": _int_or_none(merged, "max_num_frames_per_episode", minimum=1),
    }
