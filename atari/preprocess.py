"""Preprocessing of single Atari sessions: Gymnasium's ``AtariPreprocessing`` and frame stack.

A session whose config sets any of :data:`~atari.config.PREPROCESSING_KEYS`
plays the emulator as ``gymnasium.make("ALE/<Game>-v5", frameskip=1)``
wrapped in ``AtariPreprocessing(noop_max, frame_skip=frameskip, screen_size,
terminal_on_life_loss=episodic_life, grayscale_obs)`` and
``FrameStackObservation(stack_num)`` does, for the same seed and actions:

- A step repeats its action for up to ``frameskip`` emulator frames (sticky
  actions draw per frame) and stops after the frame that ends the episode:
  game over, ALE's frame limit, or with ``episodic_life`` a life lost.
- Its observation comes from two frame slots: the step's last frame and,
  with ``maxpool``, the one before, pooled by their maximum. A slot is filled
  only by a frame the step reached without ending on it, so the step that
  ends an episode early shows the frames kept from before (as
  ``AtariPreprocessing`` does). ``maxpool`` false keeps the last frame alone:
  ``AtariPreprocessing(frame_skip=1)`` over a game made with ``frameskip``,
  but for a step that ends the episode before its last frame, which stops
  there as above.
- The frame is resized to ``img_height`` x ``img_width`` with OpenCV's
  ``INTER_AREA`` when that differs from the native 210x160, then pushed on
  the stack: ``stack_num`` frames on a new first axis, oldest first; a reset
  fills the stack with its first frame (``padding_type="reset"``).
- A reset plays 1..``noop_max`` NOOP frames, their number drawn from the
  environment's generator (the one a frameskip pair draws from, seeded as
  ale-py seeds ``np_random``); a game that ends during them starts again
  (with the reset's seed). ``use_fire_reset``, on a game whose action set has
  FIRE, then presses FIRE for one frame in place of the last NOOP, as
  ``AtariVectorEnv`` does.
- ``reward_clipping`` reports the sign of a step's summed reward (-1, 0 or
  1), as ``AtariVectorEnv`` does; ``info["reward"]`` keeps the raw sum.
- ``episodic_life`` ends the *episode* at a lost life but not the *game*, as
  EnvPool and SB3's ``EpisodicLifeEnv`` do (Gymnasium's ``AtariPreprocessing``
  starts the game over instead): the next unseeded reset plays its NOOPs
  (and FIRE) in the game going on and pushes its frame on the stack; the step
  count (``max_episode_steps``) runs on. ``info["terminated"]`` is the real
  game over. A seeded reset always starts a new game.

The slots, the stack and the lives seen belong to the episode: snapshots
carry them (:meth:`Preprocessor.state`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import ale_py
import numpy as np

from openenv_ws.errors import BadSnapshot, EnvConfigError

from .config import DEFAULT_CONFIG, PREPROCESSING_KEYS

__all__ = ["Preprocessing", "Preprocessor"]


@dataclass(frozen=True, slots=True)
class Preprocessing:
    """The preprocessing a config asks for, and the frames it works on."""

    frame_shape: tuple[int, ...]  # one emulator observation: (210, 160, 3), (210, 160) or (128,)
    size: tuple[int, int] | None  # (height, width) frames are resized to; None keeps them
    stack: int
    maxpool: bool
    noop_max: int
    episodic_life: bool
    reward_clipping: bool
    fire_reset: bool  # use_fire_reset on a game whose action set has FIRE

    @classmethod
    def of(
        cls, config: Mapping[str, Any], frame_shape: tuple[int, ...], actions: list[Any]
    ) -> Preprocessing | None:
        """What a normalized config asks for; None when it asks for no preprocessing.

        Raises:
            EnvConfigError: resizing is asked for and OpenCV is not installed.
        """
        if all(config[k] == DEFAULT_CONFIG[k] for k in PREPROCESSING_KEYS):
            return None
        size = None
        if len(frame_shape) > 1:
            height = config["img_height"] or frame_shape[0]
            width = config["img_width"] or frame_shape[1]
            if (height, width) != frame_shape[:2]:
                size = (height, width)
                _require_cv2()
        return cls(
            frame_shape=frame_shape,
            size=size,
            stack=config["stack_num"],
            maxpool=config["maxpool"],
            noop_max=config["noop_max"],
            episodic_life=config["episodic_life"],
            reward_clipping=config["reward_clipping"],
            fire_reset=config["use_fire_reset"] and ale_py.Action.FIRE in actions,
        )

    @property
    def shape(self) -> tuple[int, ...]:
        """The observation's shape: the (resized) frame, behind the stack axis if stacked."""
        frame = self.frame_shape if self.size is None else (*self.size, *self.frame_shape[2:])
        return frame if self.stack == 1 else (self.stack, *frame)


def _require_cv2() -> None:
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise EnvConfigError(
            "options 'img_height'/'img_width' resize frames with OpenCV, which this server "
            "lacks; install opencv-python-headless (pip install 'openenv-ws[gym]') or leave "
            "them out"
        ) from None


class Preprocessor:
    """The frame slots, the stack and the lives of one preprocessed episode.

    Bound to one emulator: ``capture`` fills an array with its observation of
    the configured type (``ALEInterface.getScreenRGB`` and the like).
    """

    def __init__(
        self,
        options: Preprocessing,
        ale: ale_py.ALEInterface,
        capture: Callable[[np.ndarray[Any, Any]], Any],
    ) -> None:
        self.options = options
        self._act = ale.act
        self._over = ale.game_over
        self._lives_now = ale.lives
        self._capture = capture
        self._last = np.zeros(options.frame_shape, np.uint8)
        self._before = np.zeros(options.frame_shape, np.uint8)
        resized = options.shape if options.stack == 1 else options.shape[1:]
        self._stack = np.zeros((options.stack, *resized), np.uint8)
        # The observation as returned: the stack, or its only frame.
        self._obs = self._stack if options.stack > 1 else self._stack[0]
        self._lives = 0
        #: Whether the last step lost a life under ``episodic_life`` (and so ended the episode).
        self.life_lost = False
        self._resize: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]] | None = None
        if options.size is not None:
            import cv2

            dsize = (options.size[1], options.size[0])
            self._resize = lambda frame: cv2.resize(frame, dsize, interpolation=cv2.INTER_AREA)

    def clear(self) -> None:
        """Forget the episode (as a new instance starts)."""
        for array in (self._last, self._before, self._stack):
            array.fill(0)
        self._lives = 0
        self.life_lost = False

    @property
    def continues(self) -> bool:
        """Whether the next reset continues the game: the episode ended at a lost life
        under ``episodic_life`` with the game still on (as EnvPool's and SB3's
        ``EpisodicLifeEnv`` do; the real game over is ``info["terminated"]``)."""
        return self.life_lost and not self._over()

    def noops(
        self,
        rng: np.random.Generator,
        restart: Callable[[], Any],
        record: Callable[[Any], Any] | None = None,
    ) -> bool:
        """The reset's NOOP frames; `restart` starts the game again should it end during them.

        `record` is told of each NOOP played. True if the game was started again.
        """
        options = self.options
        count = int(rng.integers(1, options.noop_max + 1)) if options.noop_max > 0 else 0
        if options.fire_reset:
            count = max(count - 1, 0)
        act, over, noop = self._act, self._over, ale_py.Action.NOOP
        restarted = False
        for _ in range(count):
            act(noop)
            if record is not None:
                record(noop)
            if over():
                restart()
                restarted = True
        return restarted

    def begin(self, *, continued: bool = False) -> None:
        """The first frame of an episode, after the reset's NOOPs (and FIRE), fills the
        stack; in a `continued` game it is pushed on the stack, as a step's frame is."""
        self._capture(self._last)
        self._before.fill(0)
        self._lives = self._lives_now()
        self.life_lost = False
        if continued:
            self._stack[:-1] = self._stack[1:]
            self._stack[-1] = self._frame()
        else:
            self._stack[:] = self._frame()

    def play(self, action: Any, frames: int) -> tuple[float, int]:
        """Play one step; its reward (raw: the caller clips it) and the frames played.

        Sets :attr:`life_lost`.
        """
        options = self.options
        act, over, capture = self._act, self._over, self._capture
        episodic = options.episodic_life
        before = frames - 2 if options.maxpool else -1
        reward = 0.0
        lost = False
        played = 0
        while played < frames:
            reward += act(action)
            played += 1
            ended = over()
            if episodic:
                lives = self._lives_now()
                lost = lives < self._lives
                self._lives = lives
                ended = ended or lost
            if ended:
                break
            if played == frames:
                capture(self._last)
            elif played - 1 == before:
                capture(self._before)
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self._frame()
        self.life_lost = lost
        return reward, played

    def _frame(self) -> np.ndarray[Any, Any]:
        if self.options.maxpool:
            np.maximum(self._last, self._before, out=self._last)
        return self._last if self._resize is None else self._resize(self._last)

    def observation(self, out: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
        """The current observation: a new array, or `out` filled."""
        if out is None:
            return self._obs.copy()
        np.copyto(out, self._obs)
        return out

    # ------------------------------------------------------------------ snapshots

    def state(self) -> tuple[dict[str, Any], bytes]:
        """The episode's preprocessing state: a JSON-able header and the frames' bytes."""
        header = {"options": asdict(self.options), "lives": self._lives, "lost": self.life_lost}
        return header, b"".join(a.tobytes() for a in (self._last, self._before, self._stack))

    def load(self, header: Any, frames: bytes) -> None:
        """Take back a :meth:`state`.

        Raises:
            BadSnapshot: the state is of other preprocessing options, or damaged.
        """
        mine = json.loads(json.dumps(asdict(self.options)))
        try:
            options, lives, lost = header["options"], int(header["lives"]), bool(header["lost"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BadSnapshot(f"snapshot preprocessing header is unreadable ({exc})") from None
        if options != mine:
            raise BadSnapshot(
                f"snapshot was taken with preprocessing {options}, this session has {mine}; "
                "restore it in a session with the same config"
            )
        arrays = (self._last, self._before, self._stack)
        if len(frames) != sum(a.nbytes for a in arrays):
            raise BadSnapshot("snapshot frames do not match its preprocessing options")
        offset = 0
        for array in arrays:
            array.reshape(-1)[:] = np.frombuffer(frames, np.uint8, array.size, offset)
            offset += array.nbytes
        self._lives, self.life_lost = lives, lost
