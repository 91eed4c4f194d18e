"""The Atari environment: ale-py's ``ALEInterface`` behind the server interface.

:class:`AtariEnvironment` drives the emulator directly (no Gymnasium in the
step path) and reproduces ``gymnasium.make("ALE/<Game>-v5", ...)`` exactly:
with the same options, seed and actions it yields the same observations,
rewards and ``terminated``/``truncated`` flags.

Construction loads the ROM (about 0.1 s); :meth:`AtariEnvironment.reset`
is cheap, seeded or not, so instances can be made ahead of time per config.
ale-py's own environment reloads the ROM on a seeded reset, because the
emulator seeds its random generator only on load; this one restores the state
a load leaves, with the generator seeded as the load would have, and gets the
same episode without loading again.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import struct
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import ale_py
import numpy as np
from ale_py import roms

from openenv_ws._brief import brief, brief_keys
from openenv_ws._palette import expanded
from openenv_ws.environment import ArraySpec, DiscreteSpec, Environment, EnvResult, EnvSpec
from openenv_ws.errors import (
    BadSnapshot,
    EnvConfigError,
    InvalidAction,
    InvalidState,
    ProtocolError,
)

from .palettes import palette_of

__all__ = [
    "DEFAULT_CONFIG",
    "MAX_FRAMES",
    "MAX_FRAMESKIP",
    "MAX_GAME_NAME",
    "SNAPSHOT_KEY_ENV",
    "AtariEnvironment",
    "atari_factory",
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

#: Environment variable holding the key that signs snapshots. Servers whose
#: workers must accept each other's snapshots set the same value in each; when
#: unset, every process draws its own key and accepts only its own snapshots.
SNAPSHOT_KEY_ENV = "OPENENV_WS_SNAPSHOT_KEY"

logger = logging.getLogger("atari")

_OBS_TYPES = ("rgb", "grayscale", "ram")
# Bundled ROMs that only run in ALE's multi-player mode; ale-py registers no v5 env for them.
_MULTIPLAYER_ONLY = frozenset({"combat", "joust", "maze_craze", "warlords"})
_ACTION_NAMES: dict[Any, str] = {a: name for name, a in ale_py.Action.__members__.items()}
_NO_STEP_LIMIT = sys.maxsize

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


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
    if obs_type not in _OBS_TYPES or type(obs_type) is not str:
        raise EnvConfigError(
            f"option 'obs_type' must be one of {', '.join(_OBS_TYPES)}, got {brief(obs_type)}"
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


class AtariEnvironment(Environment):
    """One Atari 2600 game in the Arcade Learning Environment.

    Config options (all optional; defaults are those of ``ALE/<Game>-v5``):

    - ``game``: a bundled game id such as ``"pong"`` (``"Pong"`` and
      ``"ALE/Pong-v5"`` are accepted too); default ``"pong"``.
    - ``obs_type``: ``"rgb"`` (210x160x3), ``"grayscale"`` (210x160) or
      ``"ram"`` (128 bytes); default ``"rgb"``.
    - ``frameskip``: emulator frames per agent step, default 4; a pair
      ``[low, high]`` draws it uniformly from ``low..high-1`` each step.
    - ``repeat_action_probability``: sticky-action probability, default 0.25.
    - ``full_action_space``: all 18 actions instead of the game's minimal set.
    - ``mode``, ``difficulty``: a game mode/difficulty the ROM offers
      (``spec.extra["modes"]``/``["difficulties"]``); default: the game's own.
    - ``max_episode_steps``: agent steps after which the episode is truncated.
    - ``max_num_frames_per_episode``: emulator frames after which the
      episode is truncated, default 108,000 (30 minutes of play).

    Actions are ``int`` indices into the action set (``spec.action``); numpy
    integer scalars are accepted too. Anything else raises
    :class:`~openenv_ws.errors.InvalidAction`.
    """

    writes_obs_into = True
    #: Every call is bounded by the config's limits (MAX_FRAMESKIP frames a step).
    inline = True

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Load the game; this is the costly part (about 0.1 s).

        Raises:
            EnvConfigError: an unknown option, a bad value, or a mode or
                difficulty the game does not offer.
        """
        cfg = normalize_config(config)
        self._config = cfg
        self._game: str = cfg["game"]
        self._mode: int | None = cfg["mode"]
        self._difficulty: int | None = cfg["difficulty"]
        rom_path = roms.get_rom_path(self._game)
        if rom_path is None:  # games() lists only bundled ROMs, so this means a broken install
            raise EnvConfigError(f"the ROM of {self._game!r} is missing from this ale-py install")
        self._rom_path = rom_path

        ale = ale_py.ALEInterface()
        self._ale: ale_py.ALEInterface | None = ale
        ale.setFloat("repeat_action_probability", cfg["repeat_action_probability"])
        if cfg["max_num_frames_per_episode"] is not None:
            ale.setInt("max_num_frames_per_episode", cfg["max_num_frames_per_episode"])
        seeds = self._seed_game(None)
        ale.loadROM(self._rom_path)
        self._post_load = _PostLoadState.capture(ale, seeds[1])
        self._modes = [int(m) for m in ale.getAvailableModes()]
        self._difficulties = [int(d) for d in ale.getAvailableDifficulties()]
        self._check_choice("mode", self._mode, self._modes)
        self._check_choice("difficulty", self._difficulty, self._difficulties)
        self._apply_mode()

        actions = ale.getLegalActionSet() if cfg["full_action_space"] else ale.getMinimalActionSet()
        self._actions: list[Any] = list(actions)
        self._n = len(actions)

        obs_type = cfg["obs_type"]
        # Called with no argument it returns a new array; with one it fills that array.
        self._get_obs: Callable[..., Any]
        if obs_type == "rgb":
            height, width = ale.getScreenDims()
            shape: tuple[int, ...] = (height, width, 3)
            self._get_obs = ale.getScreenRGB
        elif obs_type == "grayscale":
            shape = tuple(ale.getScreenDims())
            self._get_obs = ale.getScreenGrayscale
        else:
            shape = (ale.getRAMSize(),)
            self._get_obs = ale.getRAM
        # The observation as configured; _get_obs is ale.getScreen while indexed.
        self._full_obs = self._get_obs

        frameskip = cfg["frameskip"]
        # A fixed frameskip loops over a prebuilt range; a stochastic one is drawn per step.
        self._skip: range | None = range(frameskip) if type(frameskip) is int else None
        self._skip_bounds: tuple[int, int] = (
            (frameskip[0], frameskip[1]) if self._skip is None else (0, 0)
        )
        max_steps = cfg["max_episode_steps"]
        self._max_steps = _NO_STEP_LIMIT if max_steps is None else max_steps

        self._act = ale.act
        self._game_over = ale.game_over
        self._game_truncated = ale.game_truncated
        self._lives = ale.lives
        self._episode_frame = ale.getEpisodeFrameNumber
        self._frame = ale.getFrameNumber

        self._spec = EnvSpec(
            action=DiscreteSpec(self._n, tuple(_ACTION_NAMES[a] for a in actions)),
            observation=ArraySpec(shape, "uint8", 0, 255),
            extra={
                "env": "atari",
                "config": dict(cfg),
                "game": self._game,
                "lives": int(ale.lives()),
                "legal_actions": list(range(self._n)),
                "modes": list(self._modes),
                "difficulties": list(self._difficulties),
            },
        )
        self._as_built()

    def _as_built(self) -> None:
        """The episode bookkeeping of a new instance: no episode, nothing recorded."""
        self._steps = 0
        self._episode_id: str | None = None
        self._running = False
        # After a restore the emulator's screen buffer is stale until the next frame.
        self._restored_screen: np.ndarray[Any, Any] | None = None
        self._repeats = _RepeatTracker(self._config["repeat_action_probability"], self._skip)
        self._record_action = self._repeats.actions.append
        self._record_frames = self._repeats.frames.append
        self._get_obs = self._full_obs
        self._palette: bytes | None = None  # set while observations are indexed

    def indexed_frames(self) -> bytes | None:
        """Observe palette indices (210x160) instead of RGB from now on; the palette.

        Only for ``obs_type="rgb"`` and a game whose palette is known (NTSC or
        PAL, :func:`atari.palettes.palette_of`: every bundled game); None
        otherwise, and observations stay RGB. Each reset checks the palette against ALE's own
        RGB frame and goes back to RGB (with a warning) should they differ.
        """
        ale = self._ale
        palette = palette_of(self._game) if self._config["obs_type"] == "rgb" else None
        if ale is None or palette is None:
            return None
        self._get_obs = ale.getScreen
        self._palette = palette
        return palette

    def _checked_screen(self, indices: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The reset's indexed frame if the palette expands it to ALE's RGB, else RGB."""
        assert self._palette is not None
        rgb = self._full_obs()
        if np.array_equal(expanded(indices, self._palette), rgb):
            return indices
        logger.warning(
            "game %s: ALE's RGB frame differs from its palette expansion; "
            "this instance sends RGB frames from now on",
            self._game,
        )
        self._get_obs = self._full_obs
        self._palette = None
        return rgb

    def recycle(self) -> bool:
        """Back to the state the constructor leaves, without loading the ROM again.

        The emulator gets the state a load leaves for new random seeds (as a
        seeded reset does, see :class:`_PostLoadState`), so the next session
        cannot tell it from a new instance. False after close, or for the games
        whose load state cannot be rebuilt (they are loaded anew instead).
        """
        ale = self._ale
        if ale is None or self._post_load is None:
            return False
        seeds = self._seed_game(None)
        if seeds[1] == _CLOCK_SEED:  # ALE would seed from the clock: only a load does that
            return False
        ale.restoreState(self._post_load.state(seeds[1]))
        self._apply_mode()
        self._as_built()
        return True

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _check_choice(key: str, value: int | None, allowed: list[int]) -> None:
        if value is not None and value not in allowed:
            raise EnvConfigError(
                f"option {key!r}: {brief(value)} is not available in this game; "
                f"choose one of {allowed}"
            )

    def _apply_mode(self) -> None:
        assert self._ale is not None
        if self._mode is not None:
            self._ale.setMode(self._mode)
        if self._difficulty is not None:
            self._ale.setDifficulty(self._difficulty)

    def _seed_game(self, seed: int | None) -> list[int]:
        # Same derivation as ale-py's AtariEnv.seed_game: one SeedSequence gives
        # the seed of the frameskip generator and the emulator's seed.
        np_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        self._rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(np_seed))))
        signed = int(ale_seed) - (1 << 32) if ale_seed >= 1 << 31 else int(ale_seed)
        assert self._ale is not None
        self._ale.setInt("random_seed", signed)
        return [int(np_seed), int(ale_seed)]

    # ------------------------------------------------------------------ interface

    @property
    def spec(self) -> EnvSpec:
        """Action set (with ALE action names), observation shape and the effective config."""
        return self._spec

    @property
    def config(self) -> dict[str, Any]:
        """The effective configuration (every option)."""
        return dict(self._config)

    def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> EnvResult:
        """Start a new episode.

        Args:
            seed: a non-negative integer; seeds the emulator and the frameskip
                generator and starts from the freshly loaded game, exactly
                like ale-py's ``reset(seed=...)`` (which reloads the ROM; this
                restores the loaded state instead). Without a seed the
                generators run on.
            episode_id: the id reported by :meth:`state`; a random hex id if None.
            options: no reset options exist; must be empty or None.

        Returns:
            The first observation; ``info`` holds ``lives``,
            ``episode_frame_number``, ``frame_number`` and, when seeded,
            ``seeds`` (the frameskip and emulator seeds derived from ``seed``).

        Raises:
            ProtocolError: ``seed`` is not a non-negative integer (code ``bad_request``).
            EnvConfigError: ``options`` is not empty.
        """
        ale = self._live()
        if options:
            raise EnvConfigError(
                f"Atari reset takes no options, got {brief_keys(options)}; "
                "set game options in the session config instead"
            )
        seeds = None
        if seed is not None:
            if type(seed) is not int or seed < 0:
                raise ProtocolError(
                    f"seed must be a non-negative integer or None, got {brief(seed)}",
                    code="bad_request",
                )
            seeds = self._seed_game(seed)
            if self._post_load is None or seeds[1] == _CLOCK_SEED:
                ale.loadROM(self._rom_path)
            else:
                # Loading costs ~0.1 s with the GIL held, stalling every session of the process.
                ale.restoreState(self._post_load.state(seeds[1]))
            self._apply_mode()
        ale.reset_game()
        self._repeats.start(ale, ale_py.Action.NOOP)
        self._restored_screen = None
        self._steps = 0
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        self._running = True
        info = self._info()
        if seeds is not None:
            info["seeds"] = seeds
        obs = self._get_obs()
        if self._palette is not None:
            obs = self._checked_screen(obs)
        return EnvResult(obs, info=info)

    def step(
        self, action: Any, *, obs: bool = True, out: np.ndarray[Any, Any] | None = None
    ) -> EnvResult:
        """Repeat ``action`` for ``frameskip`` frames; the reward is their sum.

        ``terminated`` is the game's own end (game over); ``truncated`` is the
        frame limit (``max_num_frames_per_episode``) or the step limit
        (``max_episode_steps``). With ``obs=False`` the screen is not fetched
        and ``obs`` is None. Each call returns a new array, or fills `out` (a
        C-contiguous array of the observation's shape and dtype) and returns it.

        Raises:
            InvalidAction: ``action`` is not an integer in ``[0, n)``.
            InvalidState: before the first reset, or after close.
        """
        if type(action) is not int or not 0 <= action < self._n:
            action = self._coerce_action(action)
        if not self._running:
            self._not_running("step")
        ale_action = self._actions[action]
        act = self._act
        reward = 0.0
        skip = self._skip
        if skip is None:
            skip = range(self._rng.integers(*self._skip_bounds))
            self._record_frames(len(skip))
        for _ in skip:
            reward += act(ale_action)
        self._record_action(ale_action)
        self._restored_screen = None
        self._steps += 1
        if not obs:
            screen = None
        elif out is None:
            screen = self._get_obs()
        else:
            self._get_obs(out)
            screen = out
        return EnvResult(
            screen,
            reward,
            self._game_over(with_truncation=False),
            self._game_truncated() or self._steps >= self._max_steps,
            {
                "lives": self._lives(),
                "episode_frame_number": self._episode_frame(),
                "frame_number": self._frame(),
            },
        )

    def _coerce_action(self, action: Any) -> int:
        if isinstance(action, np.integer) and 0 <= action < self._n:
            return int(action)
        raise InvalidAction(
            f"action must be an integer in [0, {self._n - 1}] (an index into the "
            f"{self._n} actions of {self._game}), got {brief(action)}"
        )

    def _not_running(self, op: str) -> None:
        self._live()
        raise InvalidState(f"{op} before the first reset; call reset() first", code="not_reset")

    def _live(self) -> ale_py.ALEInterface:
        if self._ale is None:
            raise InvalidState("the Atari environment is closed; make a new one", code="closed")
        return self._ale

    def _info(self) -> dict[str, Any]:
        return {
            "lives": self._lives(),
            "episode_frame_number": self._episode_frame(),
            "frame_number": self._frame(),
        }

    def _done_flags(self) -> tuple[bool, bool]:
        return (
            self._game_over(with_truncation=False),
            self._game_truncated() or self._steps >= self._max_steps,
        )

    def state(self) -> dict[str, Any]:
        """Episode id and step count, the game's settings, and the lives left."""
        ale = self._live()
        current = ale.cloneState()
        max_steps = None if self._max_steps == _NO_STEP_LIMIT else self._max_steps
        return {
            "episode_id": self._episode_id,
            "step_count": self._steps,
            "game_name": self._game,
            "obs_type": self._config["obs_type"],
            "full_action_space": self._config["full_action_space"],
            "mode": int(current.getCurrentMode()),
            "difficulty": int(current.getDifficulty()),
            "repeat_action_probability": self._config["repeat_action_probability"],
            "frameskip": self._config["frameskip"],
            "max_episode_steps": max_steps,
            "lives": int(ale.lives()),
        }

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> bytes:
        """The emulator state (with its random generator) and the episode counters.

        The bytes are signed with the process's snapshot key (see
        :data:`SNAPSHOT_KEY_ENV`); :meth:`restore` refuses anything else, so
        a snapshot from the network never reaches the emulator's decoder.

        With sticky actions ALE keeps the action it may repeat outside its
        saved state; the snapshot records it too (see :class:`_RepeatTracker`),
        and taking a snapshot leaves the running episode unchanged.
        """
        ale = self._live()
        if not self._running:
            self._not_running("snapshot")
        screen = self._restored_screen if self._restored_screen is not None else self._screen()
        state = ale.cloneState(include_rng=True)
        serialized = state.serialize()
        repeat = self._repeats.candidate(serialized)
        if repeat is None:
            # ALE's draws could not be replayed: take the likeliest candidate and make
            # the emulator use it, so that going on and restoring still agree.
            repeat = self._repeats.guess()
            self._prime_repeat(state, repeat)
            self._repeats.start(state, repeat)
        header = {
            "game": self._game,
            "step_count": self._steps,
            "episode_id": self._episode_id,
            "repeat_action": int(repeat.value),
            "rng": self._rng.bit_generator.state,
        }
        return _seal(json.dumps(header).encode(), serialized, screen.tobytes())

    def restore(self, snapshot: bytes) -> EnvResult:
        """Continue from a :meth:`snapshot`; the episode then replays identically.

        The snapshot may come from another instance with the same game and
        config (of this server, or of one sharing its snapshot key).

        Raises:
            BadSnapshot: the bytes are not a snapshot of this game made by
                this server (wrong key, damaged, or another game).
        """
        ale = self._live()
        header_bytes, state_bytes, screen_bytes = _open_seal(snapshot)
        try:
            header = json.loads(header_bytes)
            game, steps, episode_id = header["game"], header["step_count"], header["episode_id"]
            repeat = ale_py.Action(header["repeat_action"])
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = header["rng"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BadSnapshot(f"snapshot header is unreadable ({exc})") from None
        if game != self._game:
            raise BadSnapshot(
                f"snapshot is of game {game!r} but this session plays {self._game!r}; "
                "restore it in a session of the same game"
            )
        expected = self._screen()
        if len(screen_bytes) != expected.nbytes:
            raise BadSnapshot(
                f"snapshot screen has {len(screen_bytes)} bytes, this session expects "
                f"{expected.nbytes}; restore it in a session with the same obs_type"
            )
        state = ale_py.ALEState(state_bytes)
        ale.restoreState(state)
        self._prime_repeat(state, repeat)
        self._repeats.start(state, repeat)
        self._rng = rng
        self._steps = int(steps)
        self._episode_id = episode_id
        self._running = True
        screen = np.frombuffer(screen_bytes, np.uint8).reshape(expected.shape)
        self._restored_screen = screen
        obs = screen.copy() if screen.size else self._get_obs()
        terminated, truncated = self._done_flags()
        return EnvResult(obs, 0.0, terminated, truncated, self._info())

    def _screen(self) -> np.ndarray[Any, Any]:
        # RAM is read live from the emulator, so only image observations are stored.
        return np.empty(0, np.uint8) if self._config["obs_type"] == "ram" else self._full_obs()

    def _prime_repeat(self, state: ale_py.ALEState, action: Any) -> None:
        # Acting makes `action` ALE's repeat candidate as soon as one frame does not
        # repeat; restoring `state` (random generator included) then undoes the rest.
        frames = self._repeats.priming_frames
        if frames:
            assert self._ale is not None
            act = self._ale.act
            for _ in range(frames):
                act(action)
            self._ale.restoreState(state)

    def close(self) -> None:
        """Release the emulator. Idempotent; any later call raises InvalidState."""
        self._running = False
        self._ale = None
        for name in (
            "_act",
            "_game_over",
            "_game_truncated",
            "_lives",
            "_episode_frame",
            "_frame",
            "_get_obs",
            "_full_obs",
        ):
            self.__dict__.pop(name, None)


# Environment random generator text inside a serialized ALEState: std::mt19937's
# 624 state words and its position, after a 4-byte little-endian length.
_MT19937_TEXT = re.compile(rb"((?:[0-9]+ ){624})([0-9]+)")
_DRAW_SCALE = float(1 << 32)


def _mt19937_state(serialized: bytes) -> tuple[np.ndarray[Any, Any], int] | None:
    matches = list(_MT19937_TEXT.finditer(serialized))
    if not matches:
        return None
    found = matches[-1]  # the environment's generator is saved after the system's
    start, text = found.start(), found.group(0)
    if serialized[start - 4 : start] != len(text).to_bytes(4, "little"):
        return None
    return np.array(found.group(1).split(), dtype=np.uint32), int(found.group(2))


# ALEState.serialize(): six 4-byte ints (paddles, frame numbers, mode, difficulty),
# the emulator's state as a length-prefixed string, then two ints (paddle limits).
_OUTER_INTS = 24
_U32 = struct.Struct("<I")
# ALE reads a random_seed of -1 (this unsigned seed, signed) as "seed from the clock".
_CLOCK_SEED = (1 << 32) - 1


class _PostLoadState:
    """The state ``loadROM`` leaves, for any seed, without loading again.

    ``random_seed`` only seeds the environment generator (std::mt19937, the one
    sticky actions draw from); the system generator has a fixed seed of its
    own. Until a load first draws from the environment generator it runs the
    same for every seed, so a load that draws nothing sets up the same state
    for every seed but for that generator, whose text is the last field of the
    serialized state: a load with seed ``s`` leaves this state with the text of
    a freshly seeded mt19937 in its place. ``reset_game`` resets the system and
    starts the episode as after a real load.

    :meth:`capture` checks that its load drew nothing (true of all bundled
    games but those whose ROM settings press buttons while loading, such as
    Berzerk): the captured generator must be the freshly seeded one.
    """

    __slots__ = ("_generator", "_head", "_inner", "_tail")

    def __init__(self, head: bytes, inner: bytes, tail: bytes) -> None:
        self._head, self._inner, self._tail = head, inner, tail
        # Re-seeding one RandomState costs a quarter of making one.
        self._generator = np.random.RandomState()

    @classmethod
    def capture(cls, ale: ale_py.ALEInterface, ale_seed: int) -> _PostLoadState | None:
        """Split the state of a load seeded with ``ale_seed``; None for an unknown layout."""
        serialized = ale.cloneState(include_rng=True).serialize()
        matches = list(_MT19937_TEXT.finditer(serialized))
        inner_start = _OUTER_INTS + _U32.size
        if not matches or matches[-1].start() - _U32.size < inner_start:
            return None
        start, end = matches[-1].span()
        if _U32.unpack_from(serialized, _OUTER_INTS)[0] != end - inner_start:
            return None  # the generator is not the emulator state's last field
        post_load = cls(
            serialized[:_OUTER_INTS], serialized[inner_start : start - _U32.size], serialized[end:]
        )
        # Rebuilt with the load's own seed it must give back ALE's exact bytes: this
        # checks the layout and that numpy's legacy seeding is std::mt19937's.
        return post_load if post_load.serialized(ale_seed) == serialized else None

    def serialized(self, ale_seed: int) -> bytes:
        """The serialized state a load with ``random_seed`` ``ale_seed`` leaves."""
        # RandomState seeds an integer the legacy way, std::mt19937's seed(value).
        self._generator.seed(ale_seed)
        state = self._generator.get_state(legacy=False)
        key, pos = state["state"]["key"], state["state"]["pos"]
        text = f"{' '.join(map(str, key.tolist()))} {pos}".encode()
        inner_len = len(self._inner) + _U32.size + len(text)
        return b"".join(
            (self._head, _U32.pack(inner_len), self._inner, _U32.pack(len(text)), text, self._tail)
        )

    def state(self, ale_seed: int) -> ale_py.ALEState:
        """:meth:`serialized` as a state to restore."""
        return ale_py.ALEState(self.serialized(ale_seed))


class _RepeatTracker:
    """Which action ALE would repeat next: its sticky-action candidate.

    Each frame, ALE draws two numbers from its environment generator (players
    A and B) and takes player A's new action only when the first draw is at
    least the repeat probability; otherwise it repeats its candidate, which it
    does not save in its state. From an anchor (a state whose candidate is
    known) and the actions sent since, the tracker replays those draws with
    numpy's MT19937 (the same generator) and checks that it ends where the
    emulator's generator is, so a replay it cannot confirm is never trusted.
    """

    __slots__ = (
        "_anchor",
        "_anchor_action",
        "_fixed_frames",
        "_p",
        "actions",
        "frames",
        "priming_frames",
    )

    def __init__(self, repeat_probability: float, fixed_frames: range | None) -> None:
        self._p = repeat_probability
        self._fixed_frames = None if fixed_frames is None else len(fixed_frames)
        self._anchor: ale_py.ALEState | None = None
        self._anchor_action: Any = ale_py.Action.NOOP
        self.actions: list[Any] = []
        self.frames: list[int] = []  # frames per step, only for a stochastic frameskip
        # With p = 0 the candidate never matters and with p = 1 it never changes
        # (ALE's reset sets NOOP), so only 0 < p < 1 needs tracking and priming.
        # Priming acts until all frames repeating has probability below 1e-12.
        sticky = 0.0 < repeat_probability < 1.0
        self.priming_frames = (
            min(4096, math.ceil(math.log(1e-12) / math.log(repeat_probability))) if sticky else 0
        )

    def start(self, source: ale_py.ALEInterface | ale_py.ALEState, action: Any) -> None:
        """Anchor at the current state of `source`, whose candidate is `action`."""
        # Cleared in place: the environment holds these lists' bound append methods.
        self.actions.clear()
        self.frames.clear()
        self._anchor_action = action
        if self.priming_frames:
            self._anchor = (
                source.cloneState(include_rng=True)
                if isinstance(source, ale_py.ALEInterface)
                else source
            )

    def guess(self) -> Any:
        """The candidate if at least one frame of the last step did not repeat."""
        return self.actions[-1] if self.actions else self._anchor_action

    def candidate(self, serialized_now: bytes) -> Any | None:
        """The exact candidate, or None if the draws cannot be replayed and confirmed."""
        if not self.priming_frames or not self.actions:
            return self._anchor_action
        assert self._anchor is not None
        start, now = _mt19937_state(self._anchor.serialize()), _mt19937_state(serialized_now)
        if start is None or now is None:
            return None
        steps = len(self.actions)
        if self._fixed_frames is not None:
            frames = np.full(steps, self._fixed_frames)
        else:
            frames = np.array(self.frames)
        generator = np.random.MT19937()
        generator.state = {"bit_generator": "MT19937", "state": {"key": start[0], "pos": start[1]}}
        draws = generator.random_raw(2 * int(frames.sum()))
        replayed = generator.state["state"]
        if replayed["pos"] != now[1] or not np.array_equal(replayed["key"], now[0]):
            return None
        taken = np.flatnonzero(draws[0::2] / _DRAW_SCALE >= self._p)
        if taken.size == 0:
            return self._anchor_action
        step_of_frame = np.repeat(np.arange(steps), frames)
        return self.actions[int(step_of_frame[taken[-1]])]


def atari_factory(config: dict[str, Any]) -> AtariEnvironment:
    """An :data:`~openenv_ws.environment.EnvFactory` for :class:`AtariEnvironment`."""
    return AtariEnvironment(config)


# ---------------------------------------------------------------------- snapshot envelope

_MAGIC = b"OEWS-ATARI\x00\x01"
_TAG = hashlib.sha256().digest_size
# Three parts follow the magic: a JSON header, ALE's serialized state, the screen.
_LENGTHS = struct.Struct(">III")
_key: bytes | None = None


def _snapshot_key() -> bytes:
    global _key
    if _key is None:
        shared = os.environ.get(SNAPSHOT_KEY_ENV)
        _key = shared.encode() if shared else secrets.token_bytes(32)
    return _key


def _seal(*parts: bytes) -> bytes:
    body = b"".join((_MAGIC, _LENGTHS.pack(*map(len, parts)), *parts))
    return body + hmac.new(_snapshot_key(), body, hashlib.sha256).digest()


def _open_seal(data: Any) -> tuple[bytes, ...]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadSnapshot(f"snapshot must be bytes, got {type(data).__name__}")
    data = bytes(data)
    offset = len(_MAGIC) + _LENGTHS.size
    if len(data) < offset + _TAG or not data.startswith(_MAGIC):
        raise BadSnapshot(
            "snapshot is not an Atari snapshot of this server; take one with snapshot()"
        )
    body, tag = data[:-_TAG], data[-_TAG:]
    if not hmac.compare_digest(tag, hmac.new(_snapshot_key(), body, hashlib.sha256).digest()):
        raise BadSnapshot(
            "snapshot signature does not match: it was damaged or made by another server "
            f"(servers that share snapshots must share {SNAPSHOT_KEY_ENV})"
        )
    lengths = _LENGTHS.unpack_from(body, len(_MAGIC))
    if offset + sum(lengths) != len(body):
        raise BadSnapshot("snapshot length fields are inconsistent")
    parts = []
    for n in lengths:
        parts.append(body[offset : offset + n])
        offset += n
    return tuple(parts)
