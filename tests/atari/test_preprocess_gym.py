"""Preprocessed single sessions equal Gymnasium's AtariPreprocessing + FrameStackObservation.

The reference is ``gymnasium.make("ALE/<Game>-v5", frameskip=1, ...)`` wrapped
in ``AtariPreprocessing(frame_skip=frameskip)`` and ``FrameStackObservation``
(``maxpool`` on), or ``make(frameskip=1)`` with ``AtariPreprocessing(frame_skip=1)``
(``maxpool`` off: the plain last frame). Same seed, same random actions, 500
steps, across episode ends: every observation, reward, flag and counter equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ale_py
import gymnasium
import numpy as np
import pytest

from atari import AtariEnvironment

pytest.importorskip("cv2")
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

gymnasium.register_envs(ale_py)

STEPS = 500


@dataclass(frozen=True)
class Case:
    game: str
    obs_type: str = "grayscale"
    size: tuple[int, int] | None = (84, 84)  # (height, width); None: native 210x160
    stack: int = 4
    noop_max: int = 30
    episodic_life: bool = False
    maxpool: bool = True
    frameskip: int = 4
    sticky: float = 0.25
    steps: int = STEPS

    def config(self) -> dict[str, Any]:
        config = {
            "game": self.game,
            "obs_type": self.obs_type,
            "frameskip": self.frameskip,
            "repeat_action_probability": self.sticky,
            "stack_num": self.stack,
            "maxpool": self.maxpool,
            "noop_max": self.noop_max,
            "episodic_life": self.episodic_life,
        }
        if self.size is not None:
            config["img_height"], config["img_width"] = self.size
        return config

    def reference(self) -> gymnasium.Env[Any, Any]:
        base = gymnasium.make(
            f"ALE/{self.game.title()}-v5",
            frameskip=1,
            repeat_action_probability=self.sticky,
            obs_type="rgb",
        )
        height, width = self.size or (210, 160)
        env = AtariPreprocessing(
            base,
            noop_max=self.noop_max,
            frame_skip=self.frameskip if self.maxpool else 1,
            screen_size=(width, height),
            terminal_on_life_loss=self.episodic_life,
            grayscale_obs=self.obs_type == "grayscale",
            grayscale_newaxis=False,
            scale_obs=False,
        )
        return FrameStackObservation(env, self.stack)


CASES = [
    Case("pong", "rgb"),
    Case("pong", "grayscale"),
    Case("pong", "grayscale", size=(110, 84), stack=1),
    Case("pong", "rgb", size=(64, 96), stack=1),
    Case("breakout", "grayscale", episodic_life=True),
    Case("breakout", "rgb", stack=1, episodic_life=True, sticky=0.0),
    Case("breakout", "grayscale", size=None, stack=4, episodic_life=False),
    Case("breakout", "rgb", None, 1, maxpool=False, frameskip=1, episodic_life=True, steps=2000),
    Case("breakout", "grayscale", maxpool=False, frameskip=1, noop_max=0),
]


def unstack(obs: np.ndarray[Any, Any], case: Case) -> np.ndarray[Any, Any]:
    # FrameStackObservation(1) keeps a stack axis of 1; stack_num 1 has none.
    return obs[0] if case.stack == 1 else obs


def assert_same_info(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    for key in ("lives", "episode_frame_number", "frame_number"):
        assert got[key] == want[key], (where, key, got, want)


def case_id(case: Case) -> str:
    size = "native" if case.size is None else "x".join(map(str, case.size))
    pool = "maxpool" if case.maxpool else "last"
    life = "-episodic" if case.episodic_life else ""
    return f"{case.game}-{case.obs_type}-{size}-stack{case.stack}-{pool}-skip{case.frameskip}{life}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_steps_equal_gymnasium_wrappers(case: Case) -> None:
    reference = case.reference()
    env = AtariEnvironment(case.config())
    want_obs, want_info = reference.reset(seed=11)
    got = env.reset(seed=11)
    assert env.spec.observation.shape == got.obs.shape == unstack(want_obs, case).shape
    np.testing.assert_array_equal(got.obs, unstack(want_obs, case))
    assert_same_info(got.info, want_info, "reset")
    actions = np.random.default_rng(5).integers(0, env.spec.action.n, case.steps)
    episodes = 1
    lost_life = False
    for t, action in enumerate(actions.tolist()):
        obs, reward, terminated, truncated, info = reference.step(action)
        result = env.step(action)
        np.testing.assert_array_equal(result.obs, unstack(obs, case), err_msg=f"step {t}")
        assert (result.reward, result.terminated, result.truncated) == (
            reward,
            terminated,
            truncated,
        ), t
        assert_same_info(result.info, info, f"step {t}")
        if case.episodic_life and terminated and not result.info["terminated"]:
            # A lost life: Gymnasium starts the game over, this session (as EnvPool) goes on
            # (tests/atari/test_episodic_life.py); equal up to here.
            lost_life = True
            break
        if terminated or truncated:
            episodes += 1
            seed = t if episodes % 2 else None  # seeded and unseeded resets alike
            want_obs, want_info = reference.reset(seed=seed)
            got = env.reset(seed=seed)
            np.testing.assert_array_equal(got.obs, unstack(want_obs, case), err_msg=f"reset {t}")
            assert_same_info(got.info, want_info, f"reset {t}")
    if case.episodic_life:
        assert lost_life  # the test saw a lost life end an episode
    reference.close()
    env.close()


def test_plain_last_frame_equals_gymnasium_over_a_skipping_env() -> None:
    """maxpool off with frameskip 4: AtariPreprocessing(frame_skip=1) over make(frameskip=4)."""
    base = gymnasium.make("ALE/Pong-v5", frameskip=4, repeat_action_probability=0.25)
    reference = FrameStackObservation(
        AtariPreprocessing(base, noop_max=0, frame_skip=1, screen_size=(84, 84)), 4
    )
    env = AtariEnvironment(
        {"obs_type": "grayscale", "img_height": 84, "img_width": 84, "stack_num": 4}
    )
    np.testing.assert_array_equal(env.reset(seed=2).obs, reference.reset(seed=2)[0])
    for t, action in enumerate(np.random.default_rng(3).integers(0, 6, STEPS).tolist()):
        obs, reward, terminated, truncated, info = reference.step(action)
        result = env.step(action)
        np.testing.assert_array_equal(result.obs, obs, err_msg=f"step {t}")
        assert (result.reward, result.terminated, result.truncated, result.info["lives"]) == (
            reward,
            terminated,
            truncated,
            info["lives"],
        )


def test_a_game_that_ends_during_the_noops_starts_again_as_gymnasium_does() -> None:
    """With a 20-frame limit, up to 30 NOOPs end the game: both start it again and go on."""
    base = gymnasium.make("ALE/Pong-v5", frameskip=1, max_num_frames_per_episode=20)
    reference = FrameStackObservation(AtariPreprocessing(base, noop_max=30), 2)
    env = AtariEnvironment(
        {
            "obs_type": "grayscale",
            "img_height": 84,
            "img_width": 84,
            "stack_num": 2,
            "maxpool": True,
            "noop_max": 30,
            "max_num_frames_per_episode": 20,
        }
    )
    for seed in (0, 1, 2, 3, None, None, 4):
        want_obs, want_info = reference.reset(seed=seed)
        got = env.reset(seed=seed)
        np.testing.assert_array_equal(got.obs, want_obs)
        assert_same_info(got.info, want_info, f"seed {seed}")
        if seed == 0:  # seed 0 draws 22 NOOPs: 20, a new game, 2 more
            assert got.info["episode_frame_number"] == 2
        for action in (0, 1, 2):
            obs, reward, terminated, truncated, info = reference.step(action)
            result = env.step(action)
            np.testing.assert_array_equal(result.obs, obs)
            assert (result.reward, result.terminated, result.truncated) == (
                reward,
                terminated,
                truncated,
            )
            assert_same_info(result.info, info, f"seed {seed}")
