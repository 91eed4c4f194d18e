"""episodic_life ends the episode at a lost life and lets the game go on (EnvPool's rule).

Breakout has 5 lives: a game under ``episodic_life`` is 5 episodes, lives
5, 4, 3, 2, 1 at their starts, ``info["terminated"]`` (the real game over) set
only on the last; EnvPool 1.2.5 gives the same structure for the same options.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from atari.environment import AtariEnvironment
from atari.vector import AtariVectorEnvironment

CONFIG = {
    "game": "breakout",
    "obs_type": "grayscale",
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
    "maxpool": True,
    "noop_max": 30,
    "episodic_life": True,
    "reward_clipping": True,
    "use_fire_reset": True,
    "repeat_action_probability": 0.0,
}


def single_game(seed: int) -> list[tuple[int, bool, float]]:
    """(lives at the episode's start, game over at its end, raw return) per episode of one game."""
    env = AtariEnvironment(CONFIG)
    rng = np.random.default_rng(seed)
    first = env.reset(seed=seed)
    start_lives = first.info["lives"]
    episodes: list[tuple[int, bool, float]] = []
    raw = 0.0
    for _ in range(20_000):
        r = env.step(int(rng.integers(0, env.spec.action.n)))
        raw += r.info["reward"]
        assert r.reward == np.sign(r.info["reward"])
        if r.terminated or r.truncated:
            episodes.append((start_lives, r.info["terminated"], raw))
            if r.info["terminated"] or r.truncated:
                break
            again = env.reset()
            assert again.info["lives"] == r.info["lives"]  # the game went on, no new game
            assert again.info["frame_number"] > r.info["frame_number"]
            start_lives, raw = again.info["lives"], 0.0
    env.close()
    return episodes


def test_single_session_plays_every_life_of_one_game() -> None:
    episodes = single_game(3)
    assert [lives for lives, _, _ in episodes] == [5, 4, 3, 2, 1]
    assert [over for _, over, _ in episodes] == [False] * 4 + [True]


def test_a_seeded_reset_after_a_lost_life_starts_a_new_game() -> None:
    env = AtariEnvironment(CONFIG)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    while not env.step(int(rng.integers(0, 4))).terminated:
        pass
    assert env.reset(seed=2).info["lives"] == 5
    env.close()


def test_the_reset_after_a_lost_life_pushes_one_frame_on_the_stack() -> None:
    env = AtariEnvironment(CONFIG)
    env.reset(seed=4)
    rng = np.random.default_rng(4)
    while not (last := env.step(int(rng.integers(0, 4)))).terminated:
        pass
    obs = env.reset().obs
    np.testing.assert_array_equal(obs[:3], last.obs[1:])  # the stack goes on
    env.close()


def envpool_games(seed: int, envs: int) -> list[list[tuple[int, bool]]]:
    envpool = pytest.importorskip("envpool")
    pool = envpool.make(
        "Breakout-v5",
        env_type="gymnasium",
        num_envs=envs,
        episodic_life=True,
        reward_clip=True,
        seed=seed,
    )
    return _vector_games(lambda a: pool.step(a), pool.reset(), envs, seed, "terminated")


def _vector_games(step: Any, first: Any, envs: int, seed: int, over_key: str) -> Any:
    rng = np.random.default_rng(seed)
    games: list[list[tuple[int, bool]]] = [[] for _ in range(envs)]
    start = np.array(first[1]["lives"])
    done = np.zeros(envs, np.bool_)
    after_end = np.zeros(envs, np.bool_)
    for _ in range(20_000):
        _, _, term, trunc, info = step(rng.integers(0, 4, envs))
        lives = np.asarray(info["lives"])
        over = np.asarray(info[over_key]).astype(bool)
        for i in np.flatnonzero(after_end):
            start[i] = lives[i]  # the reset step
        ended = (term | trunc) & ~done
        for i in np.flatnonzero(ended):
            games[i].append((int(start[i]), bool(over[i] or trunc[i])))
            if over[i] or trunc[i]:
                done[i] = True
        after_end = term | trunc
        if done.all():
            break
    return games


def test_vector_session_plays_every_life_as_envpool_does() -> None:
    env = AtariVectorEnvironment(CONFIG, 4, 4)
    first = env.reset(seed=7)

    def step(actions: Any) -> Any:
        env.send(actions, np.arange(4))
        r = env.recv()
        assert np.array_equal(r.env_id, np.arange(4))
        assert np.array_equal(r.reward, np.sign(r.info["reward"]))
        return r.obs, r.reward, r.terminated, r.truncated, r.info

    ours = _vector_games(step, (first.obs, first.info), 4, 7, "terminated")
    env.close()
    want = [[(5, False), (4, False), (3, False), (2, False), (1, True)]] * 4
    assert ours == want
    assert envpool_games(7, 4) == want
