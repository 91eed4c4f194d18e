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

from .options import PREPROCESSING_KEYS

__all__ = [
    "DEFAULT_CONFIG",
    "INLINE_NOOPS",
    "INLINE_OBS_BYTES",
    "MAX_FRAMES",
    "MAX_FRAMESKIP",
    "MAX_GAME_NAME",
    "MAX_IMAGE_SIDE",
    "MAX_NOOPS",
    "MAX_OBS_BYTES",
    "MAX_STACK",
    "OBS_TYPES",
    "PREPROCESSING_KEYS",
    "check_choice",
    "games",
    "inline_config",
    "normalize_config",
    "obs_bytes",
]

#: Every option an Atari session accepts, with its default (those of ``ALE/<Game>-v5``;
#: the preprocessing options, named as ale-py's ``AtariVectorEnv`` names them, default
#: to no preprocessing).
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
    "img_height": None,
    "img_width": None,
    "stack_num": 1,
    "maxpool": False,
    "noop_max": 0,
    "episodic_life": False,
    "reward_clipping": False,
    "use_fire_reset": False,
}

# Options of vector sessions (checked where those are opened), named in the unknown-key error.
_VECTOR_ONLY = ("autoreset_mode", "num_threads")

#: Most emulator frames one agent step may run (``frameskip``, or a pair's ``high - 1``):
#: a step holds the event loop for about 43 us a frame, so 64 frames is about 3 ms.
MAX_FRAMESKIP = 64
#: Largest ``max_num_frames_per_episode`` and ``max_episode_steps`` (ALE's counters are C ints).
MAX_FRAMES = 2**31 - 1
#: Longest ``game`` string accepted, in characters.
MAX_GAME_NAME = 64

#: Largest ``img_height`` and ``img_width`` (the native screen is 210x160).
MAX_IMAGE_SIDE = 1024
#: Largest ``stack_num``.
MAX_STACK = 16
#: Largest ``noop_max``: a reset plays up to that many frames (about 43 ms for 1,000).
MAX_NOOPS = 1000
#: Largest observation the screen options may ask for, in bytes (height x width x channels x stack).
MAX_OBS_BYTES = 16 << 20

# A single session is served inline on the event loop only when its worst call is small:
# at most MAX_FRAMESKIP frames a step (~3 ms), and these two bounds (see inline_config).
#: Largest observation (stack included), in bytes, of a session served inline: a step
#: writes it, a reset fills the whole stack.
INLINE_OBS_BYTES = 512 << 10
#: Largest ``noop_max`` of a session served inline: a reset plays up to that many frames.
INLINE_NOOPS = 30

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
    config: Mapping[str, Any],
    key: str,
    *,
    minimum: int,
    maximum: int = MAX_FRAMES,
    nullable: bool = True,
) -> int | None:
    value = config[key]
    if value is None and nullable:
        return None
    if type(value) is not int or not minimum <= value <= maximum:
        raise EnvConfigError(
            f"option {key!r} must be an integer >= {minimum} and <= {maximum} "
            f"({minimum}..{maximum}){' or null' if nullable else ''}, got {brief(value)}"
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
    unknown = sorted(set(config) - set(DEFAULT_CONFIG), key=str)
    if unknown:
        vector_only = [k for k in _VECTOR_ONLY if k in unknown]
        hint = (
            f" ({' and '.join(vector_only)} only apply to vector sessions, opened with num_envs)"
            if vector_only
            else ""
        )
        raise EnvConfigError(
            f"unknown Atari option(s) {brief_keys(unknown)}{hint}; "
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
    for key in (
        "full_action_space",
        "maxpool",
        "episodic_life",
        "reward_clipping",
        "use_fire_reset",
    ):
        _check_bool(merged, key)
    frameskip = _frameskip(merged["frameskip"])
    normalized = {
        "game": _game_id(merged["game"]),
        "obs_type": obs_type,
        "frameskip": frameskip,
        "repeat_action_probability": float(rap),
        "full_action_space": merged["full_action_space"],
        "mode": _int_or_none(merged, "mode", minimum=0),
        "difficulty": _int_or_none(merged, "difficulty", minimum=0),
        "max_episode_steps": _int_or_none(merged, "max_episode_steps", minimum=1),
        "max_num_frames_per_episode": _int_or_none(merged, "max_num_frames_per_episode", minimum=1),
        "img_height": _int_or_none(merged, "img_height", minimum=1, maximum=MAX_IMAGE_SIDE),
        "img_width": _int_or_none(merged, "img_width", minimum=1, maximum=MAX_IMAGE_SIDE),
        "stack_num": _int_or_none(
            merged, "stack_num", minimum=1, maximum=MAX_STACK, nullable=False
        ),
        "maxpool": merged["maxpool"],
        "noop_max": _int_or_none(merged, "noop_max", minimum=0, maximum=MAX_NOOPS, nullable=False),
        "episodic_life": merged["episodic_life"],
        "reward_clipping": merged["reward_clipping"],
        "use_fire_reset": merged["use_fire_reset"],
    }
    _check_combination(normalized)
    return normalized


def check_choice(key: str, value: int | None, allowed: list[int]) -> None:
    """Refuse a ``mode`` or ``difficulty`` the loaded game does not offer (``allowed``)."""
    if value is not None and value not in allowed:
        raise EnvConfigError(
            f"option {key!r}: {brief(value)} is not available in this game; choose one of {allowed}"
        )


def _check_bool(config: Mapping[str, Any], key: str) -> None:
    if type(config[key]) is not bool:
        raise EnvConfigError(f"option {key!r} must be true or false, got {brief(config[key])}")


def _check_combination(config: Mapping[str, Any]) -> None:
    """Refuse options that are each valid but mean nothing together."""
    if config["obs_type"] == "ram":
        for key in ("img_height", "img_width", "maxpool"):
            if config[key] != DEFAULT_CONFIG[key]:
                raise EnvConfigError(
                    f"option {key!r} applies to screen observations, but obs_type is 'ram'; "
                    f"leave {key!r} out or choose obs_type 'rgb' or 'grayscale'"
                )
    if config["obs_type"] != "ram":
        channels = 3 if config["obs_type"] == "rgb" else 1
        height, width = config["img_height"] or 210, config["img_width"] or 160
        size = obs_bytes(config)
        if size > MAX_OBS_BYTES:
            raise EnvConfigError(
                f"options img_height x img_width x stack_num ({height} x {width} x "
                f"{config['stack_num']}, {channels} channel(s)) ask for {size:,}-byte "
                f"observations; the most is {MAX_OBS_BYTES:,}"
            )
    frameskip = config["frameskip"]
    fewest = frameskip if type(frameskip) is int else frameskip[0]
    if config["maxpool"] and fewest < 2:
        raise EnvConfigError(
            "option 'maxpool' takes the maximum of the last two frames of each step, so it "
            "needs 'frameskip' >= 2 (or a pair [low, high] with low >= 2), "
            f"got frameskip {brief(frameskip)}"
        )


def obs_bytes(config: Mapping[str, Any]) -> int:
    """Bytes of one observation of a normalized `config`, its stack included."""
    stack: int = config["stack_num"]
    if config["obs_type"] == "ram":
        return 128 * stack
    channels = 3 if config["obs_type"] == "rgb" else 1
    height: int = config["img_height"] or 210
    width: int = config["img_width"] or 160
    return height * width * channels * stack


def inline_config(config: Mapping[str, Any]) -> bool:
    """Whether a single session of a normalized `config` is served inline on the event loop.

    Only if its worst call is small and bounded: a step plays at most
    :data:`MAX_FRAMESKIP` frames (always), writes at most :data:`INLINE_OBS_BYTES`,
    and a reset plays at most :data:`INLINE_NOOPS` no-op frames; every call then
    takes a few milliseconds at most. Heavier preprocessing (a large resize or
    stack, many no-ops) is served on the session's worker thread.
    """
    return obs_bytes(config) <= INLINE_OBS_BYTES and config["noop_max"] <= INLINE_NOOPS
