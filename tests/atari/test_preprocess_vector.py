"""Reward clipping and fire reset: as ale-py's AtariVectorEnv defines them.

Gymnasium's wrappers do not define these two options; ``AtariVectorEnv``
(ale-py's C++ vector engine) does. With its sticky actions off and one NOOP
at most (``noop_max=1``: it draws 0..noop_max-1 NOOPs, Gymnasium 1..noop_max,
and FIRE takes the last NOOP's place in both, so both play FIRE alone), a
session and ``AtariVectorEnv(num_envs=1)`` play the same frames. The one
difference left is the stack after a reset: ``AtariVectorEnv`` pads it with
zeros, a session with the first frame (Gymnasium's FrameStackObservation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from atari import AtariEnvironment

pytest.importorskip("cv2")
vector_env = pytest.importorskip("ale_py.vector_env")

STEPS = 500
STACK = 4


def pair(game: str, *, grayscale: bool, clip: bool, maxpool: bool) -> tuple[Any, AtariEnvironment]:
    options = {
        "img_height": 84,
        "img_width": 84,
        "stack_num": STACK,
        "maxpool": maxpool,
        "noop_max": 1,
        "episodic_life": False,
        "reward_clipping": clip,
        "use_fire_reset": True,
        "repeat_action_probability": 0.0,
    }
    vector = vector_env.AtariVectorEnv(game, 1, grayscale=grayscale, frameskip=4, **options)
    session = AtariEnvironment(
        {"game": game, "obs_type": "grayscale" if grayscale else "rgb", **options}
    )
    return vector, session


@pytest.mark.parametrize(
    ("game", "grayscale", "clip", "maxpool"),
    [
        ("space_invaders", True, True, True),
        ("space_invaders", False, False, True),
        ("breakout", True, True, True),
        ("breakout", False, True, False),
    ],
)
def test_fire_reset_and_reward_clipping_equal_atari_vector_env(
    game: str, grayscale: bool, clip: bool, maxpool: bool
) -> None:
    vector, session = pair(game, grayscale=grayscale, clip=clip, maxpool=maxpool)
    obs, info = vector.reset(seed=4)
    first = session.reset(seed=4)
    assert first.info["episode_frame_number"] == info["episode_frame_number"][0] == 1  # FIRE
    np.testing.assert_array_equal(first.obs[-1], obs[0][-1])
    assert (first.obs[:-1] == first.obs[-1]).all() and not obs[0][:-1].any()  # the padding
    fresh = 1  # frames of the stack that came after the reset
    rewards: list[float] = []
    ends = 0
    was_done = False
    for t, action in enumerate(np.random.default_rng(8).integers(0, 4, STEPS).tolist()):
        obs, reward, terminated, truncated, info = vector.step(np.array([action]))
        if was_done:
            # AtariVectorEnv resets on the step after an episode's end (next_step mode).
            got = session.reset()
            fresh = 1
            np.testing.assert_array_equal(got.obs[-1], obs[0][-1], err_msg=f"reset {t}")
            was_done = False
            continue
        result = session.step(action)
        fresh = min(fresh + 1, STACK)
        np.testing.assert_array_equal(result.obs[-fresh:], obs[0][-fresh:], err_msg=f"step {t}")
        assert (result.reward, result.terminated, result.truncated) == (
            reward[0],
            terminated[0],
            truncated[0],
        ), t
        assert result.info["lives"] == info["lives"][0], t
        rewards.append(result.reward)
        was_done = result.terminated or result.truncated
        ends += was_done
    vector.close()
    if game == "breakout":
        assert ends >= 2  # the autoresets were followed
    if clip:
        assert set(rewards) <= {-1.0, 0.0, 1.0} and 1.0 in rewards
    elif game == "space_invaders":
        assert max(rewards) > 1.0  # the clipping above is not vacuous


def test_clipped_rewards_are_the_signs_of_the_rewards() -> None:
    config = {"game": "space_invaders", "stack_num": 2, "noop_max": 30}
    plain, clipped = AtariEnvironment(config), AtariEnvironment({**config, "reward_clipping": True})
    np.testing.assert_array_equal(plain.reset(seed=1).obs, clipped.reset(seed=1).obs)
    seen = set()
    for action in np.random.default_rng(2).integers(0, 6, STEPS).tolist():
        want, got = plain.step(action), clipped.step(action)
        np.testing.assert_array_equal(got.obs, want.obs)
        assert got.reward == np.sign(want.reward) and got.info.pop("reward") == want.reward
        assert got.info == want.info
        seen.add(want.reward)
        if want.done:
            break
    assert max(seen) > 1.0


def test_fire_reset_takes_the_place_of_the_last_noop() -> None:
    base = {"game": "breakout", "noop_max": 30}
    plain, fire = AtariEnvironment(base), AtariEnvironment({**base, "use_fire_reset": True})
    for seed in range(5):
        a, b = plain.reset(seed=seed), fire.reset(seed=seed)
        # The same count of frames; the last one pressed FIRE (which launches no ball yet).
        assert a.info["episode_frame_number"] == b.info["episode_frame_number"] >= 1
    alone = AtariEnvironment({"game": "breakout", "use_fire_reset": True})
    assert alone.reset(seed=0).info["episode_frame_number"] == 1  # no NOOPs: FIRE alone


def test_fire_reset_is_nothing_for_a_game_without_fire() -> None:
    config = {"game": "freeway", "noop_max": 5}
    plain, fire = AtariEnvironment(config), AtariEnvironment({**config, "use_fire_reset": True})
    assert "FIRE" not in plain.spec.action.meanings
    np.testing.assert_array_equal(plain.reset(seed=3).obs, fire.reset(seed=3).obs)
    for action in (0, 1, 1, 2):
        np.testing.assert_array_equal(plain.step(action).obs, fire.step(action).obs)
