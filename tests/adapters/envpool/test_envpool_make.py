"""openenv_ws.envpool.make against EnvPool 1.2.5 with the same task and options: spaces,
info keys, shapes and dtypes, the episode structure of episodic_life, async batches."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest

import openenv_ws.envpool as ours
from openenv_ws.errors import EnvConfigError
from openenv_ws.server import ServerThread

envpool = pytest.importorskip("envpool")

OPTIONS: dict[str, Any] = {"episodic_life": True, "reward_clip": True}


def both(url: str, **kwargs: Any) -> tuple[Any, Any]:
    options = {**OPTIONS, **kwargs}
    return (
        envpool.make("Breakout-v5", env_type="gymnasium", **options),
        ours.make("Breakout-v5", env_type="gymnasium", url=url, **options),
    )


def layout(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: layout(v) for k, v in value.items()}
    return (np.asarray(value).dtype.str, np.shape(value))


def test_spaces_results_and_info_keys_are_envpools(atari_server: ServerThread) -> None:
    theirs, mine = both(atari_server.url, num_envs=3)
    assert isinstance(mine, gymnasium.Env) and isinstance(mine, gymnasium.vector.VectorEnv)
    assert mine.observation_space == theirs.observation_space == mine.single_observation_space
    assert mine.action_space == theirs.action_space == mine.single_action_space
    assert mine.num_envs == theirs.num_envs == 3
    want_obs, want_info = theirs.reset()
    got_obs, got_info = mine.reset()
    assert layout(got_obs) == layout(want_obs)
    keys = set(want_info) - {"ram"}  # EnvPool's RAM copy is not sent
    assert keys <= set(got_info)
    assert {k: layout(got_info[k]) for k in keys} == {k: layout(want_info[k]) for k in keys}
    actions = np.ones(3, np.int64)
    want = theirs.step(actions)
    got = mine.step(actions)
    assert [layout(x) for x in got[:4]] == [layout(x) for x in want[:4]]
    assert {k: layout(got[4][k]) for k in keys} == {k: layout(want[4][k]) for k in keys}
    assert got[4]["elapsed_step"].tolist() == want[4]["elapsed_step"].tolist() == [1, 1, 1]
    theirs.close()
    mine.close()


def games(env: Any, envs: int, seed: int) -> list[list[tuple[int, int]]]:
    """Per env, (lives at the end, real game over) of each episode of its first game."""
    rng = np.random.default_rng(seed)
    env.reset()
    out: list[list[tuple[int, int]]] = [[] for _ in range(envs)]
    done = np.zeros(envs, np.bool_)
    for _ in range(5000):
        _, reward, term, trunc, info = env.step(rng.integers(0, 4, envs))
        assert np.array_equal(reward, np.sign(info["reward"]))
        for i in np.flatnonzero((term | trunc) & ~done):
            out[i].append((int(info["lives"][i]), int(info["terminated"][i])))
            done[i] |= bool(info["terminated"][i] or trunc[i])
        if done.all():
            break
    assert done.all()
    return out


def test_episodic_life_episodes_are_envpools(atari_server: ServerThread) -> None:
    theirs, mine = both(atari_server.url, num_envs=4)
    want = [[(4, 0), (3, 0), (2, 0), (1, 0), (0, 1)]] * 4
    assert games(theirs, 4, 0) == want
    assert games(mine, 4, 0) == want
    theirs.close()
    mine.close()


def test_elapsed_step_runs_on_over_lost_lives(atari_server: ServerThread) -> None:
    env = ours.make("Breakout-v5", num_envs=1, url=atari_server.url, **OPTIONS)
    env.reset()
    rng = np.random.default_rng(1)
    for steps in range(1, 3000):
        _, _, term, _, info = env.step(rng.integers(0, 4, 1))
        assert info["elapsed_step"][0] == steps
        if term[0]:
            env.step(np.zeros(1, np.int64))  # the reset step after a lost life: not counted
            if info["terminated"][0]:
                break
    assert info["terminated"][0] == 1 and info["lives"][0] == 0
    env.close()


def test_async_batches_send_recv_and_env_id(atari_server: ServerThread) -> None:
    theirs, mine = both(atari_server.url, num_envs=4, batch_size=2)
    for env in (theirs, mine):
        env.async_reset()
        seen: set[int] = set()
        for _ in range(6):
            obs, reward, _, _, info = env.recv()
            assert obs.shape == (2, 4, 84, 84) and reward.shape == (2,)
            assert info["env_id"].dtype == np.int32 and len(set(info["env_id"].tolist())) == 2
            seen |= set(info["env_id"].tolist())
            env.send(np.zeros(2, np.int64), info["env_id"])
        if env is mine:  # EnvPool's batches are whichever envs are ready first
            assert seen == {0, 1, 2, 3}
        obs, *_ = env.step(np.zeros(2, np.int64), env.recv()[4]["env_id"])
        assert obs.shape == (2, 4, 84, 84)
        env.close()


def test_envpool_option_names_and_defaults() -> None:
    config = ours.to_config("SpaceInvaders-v5", frame_skip=2, gray_scale=False, noop_max=0)
    assert config["game"] == "space_invaders" and config["frameskip"] == 2
    assert config["obs_type"] == "rgb" and config["noop_max"] == 0
    defaults = ours.to_config("Pong-v5")
    spec = envpool.make_spec("Pong-v5").config
    assert (defaults["img_height"], defaults["img_width"]) == (spec.img_height, spec.img_width)
    assert defaults["stack_num"] == spec.stack_num and defaults["noop_max"] == spec.noop_max
    assert defaults["use_fire_reset"] is spec.use_fire_reset
    assert defaults["repeat_action_probability"] == spec.repeat_action_probability
    assert defaults["max_num_frames_per_episode"] == spec.max_episode_steps * spec.frame_skip
    with pytest.raises(EnvConfigError, match="reward_clip"):
        ours.to_config("Pong-v5", reward_clipping=True)  # ours; EnvPool's name is listed
    with pytest.raises(EnvConfigError, match="reward_clip, stack_num"):  # before connecting
        ours.make("Pong-v5", url="ws://127.0.0.1:9", reward_clipping=True)
    with pytest.raises(EnvConfigError, match="Atari task"):
        ours.to_config("CartPole-v1")


def test_a_gymnasium_wrapper_wraps_it(atari_server: ServerThread) -> None:
    class Count(gymnasium.Wrapper):  # type: ignore[type-arg]
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            self.num_envs = env.num_envs

    env = Count(ours.make("Pong-v5", "gym", num_envs=2, url=atari_server.url))  # CleanRL's
    obs, _ = env.reset()
    assert obs.shape == (2, 4, 84, 84) and env.num_envs == 2
    env.close()
