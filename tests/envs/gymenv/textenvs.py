"""Small Gymnasium environments with the spaces Gymnasium's own ids do not have.

Importing this module registers them, each with an entry point string, so a
server makes them by id the way Gymnasium does for any package:
``gymnasium.make("tests.envs.gymenv.textenvs:Typing-v0")`` imports this module,
then makes the id.

- ``Typing-v0``: a Text observation (a word) and a Text action (the agent's
  typing); reward the share of letters typed right; renders rgb_array frames.
- ``AllSpaces-v0``: a Dict action and a Dict observation holding every space
  (Text, MultiBinary, MultiDiscrete with a start, Tuple, Discrete with a
  start, Box with per-element bounds), nested; it checks that each action
  comes as Gymnasium's value (a tuple for the Tuple, arrays in the space's
  dtypes).
- ``SequenceObs-v0``: a Sequence observation, which has no form on the wire;
  ``DeepObs-v0``: Dict and Tuple spaces 7 levels deep, more than a session carries.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

MODULE = "tests.envs.gymenv.textenvs"
TYPING = f"{MODULE}:Typing-v0"
ALL_SPACES = f"{MODULE}:AllSpaces-v0"
SEQUENCE = f"{MODULE}:SequenceObs-v0"
DEEP = f"{MODULE}:DeepObs-v0"

LETTERS = "abcdefgh"
WORD = 5


class TypingEnv(gymnasium.Env[str, str]):
    """Shows a word; the agent types it. Episodes end when a word is typed exactly."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012 - Gymnasium's API

    def __init__(self, render_mode: str | None = None, renderer: bool = True) -> None:
        self.observation_space = spaces.Text(WORD, min_length=WORD, charset=LETTERS)
        self.action_space = spaces.Text(WORD, min_length=0, charset=LETTERS)
        self.render_mode = render_mode
        self._renderer = renderer  # False: rendering fails, as without pygame or OpenGL
        self._word = ""
        self._typed = ""

    def _new_word(self) -> str:
        return "".join(self.np_random.choice(list(LETTERS), WORD))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        self._word, self._typed = self._new_word(), ""
        return self._word, {"length": WORD}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert type(action) is str and self.action_space.contains(action), action
        hits = sum(a == b for a, b in zip(action, self._word, strict=False))
        done = action == self._word
        self._typed, self._word = action, self._new_word()
        return self._word, hits / WORD, done, False, {"typed": action, "hits": hits}

    def render(self) -> np.ndarray[Any, Any]:
        """One 4x4 block per letter of the word (its shade) over the typed one."""
        if not self._renderer:
            raise gymnasium.error.DependencyNotInstalled("no renderer here")
        frame = np.zeros((8, 4 * WORD, 3), np.uint8)
        for i, ch in enumerate(self._word):
            frame[:4, 4 * i : 4 * i + 4] = (30 * (LETTERS.index(ch) + 1), 40 * i, 255)
        for i, ch in enumerate(self._typed):
            frame[4:, 4 * i : 4 * i + 4] = (255, 30 * (LETTERS.index(ch) + 1), 0)
        return frame


class AllSpacesEnv(gymnasium.Env[dict[str, Any], dict[str, Any]]):
    """Every section 22 space in its action and observation, nested."""

    def __init__(self) -> None:
        self.action_space = spaces.Dict(
            {
                "word": spaces.Text(6, min_length=1, charset="xyz"),
                "keys": spaces.MultiBinary(4),
                "dial": spaces.MultiDiscrete([3, 5], start=[1, 0]),
                "pair": spaces.Tuple(
                    (spaces.Discrete(3, start=-1), spaces.Box(-1.0, 1.0, (2,), np.float32))
                ),
            }
        )
        self.observation_space = spaces.Dict(
            {
                "echo": spaces.Text(6, min_length=0, charset="xyz"),
                "grid": spaces.MultiBinary([2, 3]),
                "levels": spaces.MultiDiscrete([4, 4]),
                "pos": spaces.Box(
                    np.array([-1.0, -2.0, -np.inf]), np.array([1.0, 2.0, np.inf]), dtype=np.float64
                ),
                "score": spaces.Discrete(10, start=-5),
                "nested": spaces.Tuple((spaces.Discrete(2), spaces.Text(3, charset="ab"))),
            }
        )
        self._score = 0

    def _obs(self, echo: str) -> dict[str, Any]:
        rng = self.np_random
        return {
            "echo": echo,
            "grid": rng.integers(0, 2, (2, 3)).astype(np.int8),
            "levels": rng.integers(0, 4, 2),
            "pos": np.array([rng.uniform(-1, 1), rng.uniform(-2, 2), rng.normal() * 1e3]),
            "score": self._score,
            "nested": (int(rng.integers(0, 2)), "ab"[: int(rng.integers(1, 3))]),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._score = 0
        return self._obs(""), {}

    def step(
        self, action: dict[str, Any]
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), action
        sign, vec = action["pair"]
        assert type(action["pair"]) is tuple and isinstance(sign, int | np.integer), action
        assert vec.dtype == np.float32 and action["keys"].dtype == np.int8, action
        self._score = max(-5, min(4, self._score + sign))
        reward = float(action["keys"].sum()) + float(vec.sum()) + float(action["dial"][0])
        terminated = bool(action["dial"][1] == 4 and sign == 1)
        info = {"dial": action["dial"], "word_length": len(action["word"])}
        return self._obs(action["word"]), reward, terminated, False, info


class SequenceObsEnv(gymnasium.Env[Any, int]):
    """A Sequence observation: a space section 22 has no form for."""

    observation_space = spaces.Sequence(spaces.Discrete(2))
    action_space = spaces.Discrete(2)


class DeepObsEnv(gymnasium.Env[Any, int]):
    """Dict and Tuple spaces 7 levels deep: more than a session carries."""

    observation_space = spaces.Dict(
        {
            "a": spaces.Tuple(
                (
                    spaces.Dict(
                        {
                            "b": spaces.Tuple(
                                (
                                    spaces.Dict(
                                        {
                                            "c": spaces.Tuple(
                                                (spaces.Dict({"d": spaces.Discrete(2)}),)
                                            )
                                        }
                                    ),
                                )
                            )
                        }
                    ),
                )
            )
        }
    )
    action_space = spaces.Discrete(2)


for _name, _cls, _steps in (
    ("Typing-v0", "TypingEnv", 12),
    ("AllSpaces-v0", "AllSpacesEnv", 25),
    ("SequenceObs-v0", "SequenceObsEnv", None),
    ("DeepObs-v0", "DeepObsEnv", None),
):
    if _name not in gymnasium.registry:
        gymnasium.register(_name, entry_point=f"{MODULE}:{_cls}", max_episode_steps=_steps)
