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

import json
import logging
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import ale_py
import numpy as np
from ale_py import roms

from openenv_ws.brief import brief, brief_keys
from openenv_ws.environment import ArraySpec, DiscreteSpec, Environment, EnvResult, EnvSpec
from openenv_ws.errors import (
    BadSnapshot,
    EnvConfigError,
    InvalidAction,
    InvalidState,
    ProtocolError,
)
from openenv_ws.palette import expanded

from .ale_state import CLOCK_SEED, PostLoadState, RepeatTracker
from .config import check_choice, inline_config, normalize_config
from .palettes import palette_of
from .preprocess import Preprocessing, Preprocessor
from .snapshots import open_seal, seal

__all__ = ["AtariEnvironment"]

logger = logging.getLogger("atari")

_ACTION_NAMES: dict[Any, str] = {a: name for name, a in ale_py.Action.__members__.items()}
_NO_STEP_LIMIT = sys.maxsize

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


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
    - Preprocessing, off by default (:mod:`atari.preprocess`, equal to
      Gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation``):
      ``img_height``/``img_width``, ``stack_num``, ``maxpool``, ``noop_max``,
      ``episodic_life``, ``reward_clipping``, ``use_fire_reset``.

    Actions are ``int`` indices into the action set (``spec.action``); numpy
    integer scalars are accepted too. Anything else raises
    :class:`~openenv_ws.errors.InvalidAction`.
    """

    writes_obs_into = True
    #: Every call is bounded by the config's limits (MAX_FRAMESKIP frames a step); set
    #: per instance by :func:`~atari.config.inline_config` (heavy preprocessing: False).
    inline = True
    #: The emulator holds the GIL: off the loop, one such call at a time per process.
    holds_gil = True

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        """Load the game; this is the costly part (about 0.1 s).

        Raises:
            EnvConfigError: an unknown option, a bad value, or a mode or
                difficulty the game does not offer.
        """
        cfg = normalize_config(config)
        self._config = cfg
        self.inline = inline_config(cfg)
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
        self._post_load = PostLoadState.capture(ale, seeds[1])
        self._modes = [int(m) for m in ale.getAvailableModes()]
        self._difficulties = [int(d) for d in ale.getAvailableDifficulties()]
        check_choice("mode", self._mode, self._modes)
        check_choice("difficulty", self._difficulty, self._difficulties)
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
        options = Preprocessing.of(cfg, shape, self._actions)
        self._pre = None if options is None else Preprocessor(options, ale, self._full_obs)
        if options is not None:
            shape = options.shape

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
        # A preprocessed step may stop early, so its frames are recorded one by one.
        fixed = self._skip if self._pre is None else None
        self._repeats = RepeatTracker(self._config["repeat_action_probability"], fixed)
        self._record_action = self._repeats.actions.append
        self._record_frames = self._repeats.frames.append
        self._get_obs = self._full_obs
        self._palette: bytes | None = None  # set while observations are indexed
        if self._pre is not None:
            self._pre.clear()

    def indexed_frames(self) -> bytes | None:
        """Observe palette indices (210x160) instead of RGB from now on; the palette.

        Only for ``obs_type="rgb"`` without preprocessing and a game whose
        palette is known (NTSC or PAL, :func:`atari.palettes.palette_of`: every
        bundled game); None otherwise, and observations stay RGB. Each reset
        checks the palette against ALE's own RGB frame and goes back to RGB
        (with a warning) should they differ.
        """
        ale = self._ale
        plain_rgb = self._config["obs_type"] == "rgb" and self._pre is None
        palette = palette_of(self._game) if plain_rgb else None
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
        seeded reset does, see :class:`PostLoadState`), so the next session
        cannot tell it from a new instance. False after close, or for the games
        whose load state cannot be rebuilt (they are loaded anew instead).
        """
        ale = self._ale
        if ale is None or self._post_load is None:
            return False
        seeds = self._seed_game(None)
        if seeds[1] == CLOCK_SEED:  # ALE would seed from the clock: only a load does that
            return False
        ale.restoreState(self._post_load.state(seeds[1]))
        self._apply_mode()
        self._as_built()
        return True

    # ------------------------------------------------------------------ setup

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
        if seed is not None and (type(seed) is not int or seed < 0):
            raise ProtocolError(
                f"seed must be a non-negative integer or None, got {brief(seed)}",
                code="bad_request",
            )
        pre = self._pre
        # After a lost life the game goes on, unless seeded anew or truncated.
        going_on = seed is None and pre is not None and self._running and pre.continues
        if going_on and not any(self._done_flags()):
            assert pre is not None
            return self._continue_game(ale, pre, episode_id)
        seeds = self._new_game(ale, seed)
        if pre is not None:
            pre.noops(self._rng, lambda: self._new_game(ale, seed))
        self._repeats.start(ale, ale_py.Action.NOOP)
        if pre is not None:
            if pre.options.fire_reset:
                ale.act(ale_py.Action.FIRE)
                self._record_action(ale_py.Action.FIRE)
                self._record_frames(1)
            pre.begin()
        self._restored_screen = None
        self._steps = 0
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        self._running = True
        info = self._info()
        if seeds is not None:
            info["seeds"] = seeds
        if pre is not None:
            return EnvResult(pre.observation(), info=info)
        obs = self._get_obs()
        if self._palette is not None:
            obs = self._checked_screen(obs)
        return EnvResult(obs, info=info)

    def _continue_game(
        self, ale: ale_py.ALEInterface, pre: Preprocessor, episode_id: str | None
    ) -> EnvResult:
        """The reset after a life lost under ``episodic_life``: the game goes on (EnvPool's
        rule). Its NOOPs (and FIRE) are recorded as steps, so snapshots stay exact."""

        def noop(action: Any) -> None:
            self._record_action(action)
            self._record_frames(1)

        if pre.noops(self._rng, lambda: self._new_game(ale, None), noop):
            self._steps = 0  # the game ended during the NOOPs and started again
            self._repeats.start(ale, ale_py.Action.NOOP)
        if pre.options.fire_reset:
            ale.act(ale_py.Action.FIRE)
            noop(ale_py.Action.FIRE)
        pre.begin(continued=True)
        self._restored_screen = None
        self._episode_id = episode_id if episode_id is not None else uuid.uuid4().hex
        return EnvResult(pre.observation(), info=self._info())

    def _new_game(self, ale: ale_py.ALEInterface, seed: int | None) -> list[int] | None:
        """Start the game over; seeded, from the freshly loaded game. The seeds derived."""
        seeds = None
        if seed is not None:
            seeds = self._seed_game(seed)
            if self._post_load is None or seeds[1] == CLOCK_SEED:
                ale.loadROM(self._rom_path)
            else:
                # Loading costs ~0.1 s with the GIL held, stalling every session of the process.
                ale.restoreState(self._post_load.state(seeds[1]))
            self._apply_mode()
        ale.reset_game()
        return seeds

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
        if self._pre is not None:
            return self._preprocessed_step(self._pre, action, obs, out)
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

    def _preprocessed_step(
        self, pre: Preprocessor, action: int, obs: bool, out: np.ndarray[Any, Any] | None
    ) -> EnvResult:
        ale_action = self._actions[action]
        skip = self._skip
        frames = len(skip) if skip is not None else int(self._rng.integers(*self._skip_bounds))
        raw, played = pre.play(ale_action, frames)
        self._record_action(ale_action)
        self._record_frames(played)
        self._steps += 1
        terminated, truncated = self._done_flags()
        info = self._info()
        if pre.options.reward_clipping:
            info["reward"] = raw
        if pre.options.episodic_life:
            info["terminated"] = terminated
        return EnvResult(
            pre.observation(out) if obs else None,
            float(np.sign(raw)) if pre.options.reward_clipping else raw,
            terminated or pre.life_lost,
            truncated,
            info,
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
        info: dict[str, Any] = {
            "lives": self._lives(),
            "episode_frame_number": self._episode_frame(),
            "frame_number": self._frame(),
        }
        pre = self._pre
        if pre is not None:  # EnvPool's keys, in resets as in steps
            if pre.options.reward_clipping:
                info["reward"] = 0.0
            if pre.options.episodic_life:
                info["terminated"] = False
        return info

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
        :data:`~atari.snapshots.SNAPSHOT_KEY_ENV`); :meth:`restore` refuses anything else, so
        a snapshot from the network never reaches the emulator's decoder.

        With sticky actions ALE keeps the action it may repeat outside its
        saved state; the snapshot records it too (see :class:`RepeatTracker`),
        and taking a snapshot leaves the running episode unchanged.
        """
        ale = self._live()
        if not self._running:
            self._not_running("snapshot")
        header: dict[str, Any] = {}
        if self._pre is not None:  # the observation is the preprocessor's, not the screen
            header["preprocess"], screen = self._pre.state()
        else:
            restored = self._restored_screen
            screen = (restored if restored is not None else self._screen()).tobytes()
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
            **header,
        }
        return seal(json.dumps(header).encode(), serialized, screen)

    def restore(self, snapshot: bytes) -> EnvResult:
        """Continue from a :meth:`snapshot`; the episode then replays identically.

        The snapshot may come from another instance with the same game and
        config (of this server, or of one sharing its snapshot key).

        Raises:
            BadSnapshot: the bytes are not a snapshot of this game made by
                this server (wrong key, damaged, or another game).
        """
        ale = self._live()
        header_bytes, state_bytes, screen_bytes = open_seal(snapshot)
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
        if ("preprocess" in header) != (self._pre is not None):
            raise BadSnapshot(
                "snapshot and session differ in preprocessing options; "
                "restore it in a session with the same config"
            )
        if self._pre is not None:
            self._pre.load(header["preprocess"], screen_bytes)
        expected = self._screen()
        if self._pre is None and len(screen_bytes) != expected.nbytes:
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
        if self._pre is not None:
            obs = self._pre.observation()
        else:
            screen = np.frombuffer(screen_bytes, np.uint8).reshape(expected.shape)
            self._restored_screen = screen
            obs = screen.copy() if screen.size else self._get_obs()
        terminated, truncated = self._done_flags()
        terminated = terminated or (self._pre is not None and self._pre.life_lost)
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
