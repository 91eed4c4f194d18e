"""RemoteVecEnv, the Stable-Baselines3 VecEnv adapter, against live servers: SB3's own
DummyVecEnv over single remote envs is the reference for every result and info."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from openenv_ws.errors import EnvConfigError, InvalidState
from openenv_ws.gym import RemoteEnv
from openenv_ws.sb3 import RemoteVecEnv
from openenv_ws.server import ServerThread
from openenv_ws.testing import FakeEnvironment

# Breakout on RAM (small and fast), cut every 40 frames (10 steps): truncated episodes.
ATARI = {"game": "breakout", "obs_type": "ram", "max_num_frames_per_episode": 40}
FAKE = {"obs_shape": [3, 2], "episode_length": 3}


def _assert_same_info(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[key], value, err_msg=f"{where} {key}")
        else:
            assert got[key] == value, (where, key)


@pytest.mark.parametrize("which", ["fake", "atari"])
def test_results_equal_dummy_vec_env(
    fake_server: ServerThread, atari_server: ServerThread, which: str
) -> None:
    """Same sessions, seeds and actions: the same observations, rewards, dones, infos
    (terminal_observation, TimeLimit.truncated) and reset_infos as SB3's DummyVecEnv."""
    url, config = (fake_server.url, FAKE) if which == "fake" else (atari_server.url, ATARI)
    n = 3
    want_env = DummyVecEnv([functools.partial(RemoteEnv, url, config=config)] * n)
    got_env = RemoteVecEnv(url, n, config=config, session="per_env")
    assert got_env.observation_space == want_env.observation_space
    assert got_env.action_space == want_env.action_space
    assert got_env.seed(5) == want_env.seed(5) == [5, 6, 7]
    np.testing.assert_array_equal(got_env.reset(), want_env.reset())
    for i in range(n):
        _assert_same_info(got_env.reset_infos[i], want_env.reset_infos[i], f"reset {i}")
    rng = np.random.default_rng(5)
    ends = 0
    for t in range(24):
        actions = rng.integers(0, got_env.action_space.n, n)  # type: ignore[attr-defined]
        got, want = got_env.step(actions), want_env.step(actions)
        for k in range(3):
            g, w = np.asarray(got[k]), np.asarray(want[k])
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (t, k)
            np.testing.assert_array_equal(g, w, err_msg=f"t={t} item {k}")
        assert isinstance(got[3], list) and len(got[3]) == n
        for i in range(n):
            _assert_same_info(got[3][i], want[3][i], f"t={t} env {i}")
            _assert_same_info(got_env.reset_infos[i], want_env.reset_infos[i], f"t={t} reset {i}")
        ends += int(want[2].sum())
    assert ends >= 2 * n  # episodes ended along the way (truncated ones for Atari)
    got_env.close()
    want_env.close()


@pytest.mark.parametrize("session", ["vector", "per_env"])
def test_terminal_observation_is_the_last_of_the_episode(
    fake_server: ServerThread, session: str
) -> None:
    n, length = 2, FAKE["episode_length"]
    env = RemoteVecEnv(fake_server.url, n, config=FAKE, session=session)
    twins = [FakeEnvironment(FAKE) for _ in range(n)]
    env.seed(9)
    obs = env.reset()
    for i, twin in enumerate(twins):
        np.testing.assert_array_equal(obs[i], twin.reset(seed=9 + i).obs)
    steps = 0
    for t in range(2 * length + 1):
        actions = np.array([t % 4, (t + 1) % 4])
        obs, rewards, dones, infos = env.step(actions)
        steps += 1
        for i, twin in enumerate(twins):
            want = twin.step(int(actions[i]))
            assert rewards[i] == want.reward and dones[i] == want.terminated
            if want.terminated and session == "vector":
                # A vector session's batch has no info of an episode's last step (SPEC 21).
                assert sorted(infos[i]) == ["TimeLimit.truncated", "terminal_observation"]
            else:
                assert infos[i]["step"] == (steps - 1) % length + 1
            if want.terminated:
                np.testing.assert_array_equal(infos[i]["terminal_observation"], want.obs)
                assert infos[i]["TimeLimit.truncated"] is False
                want = twin.reset()  # the adapter's obs is the new episode's first
                assert env.reset_infos[i] == {"step": 0}
            else:
                assert "terminal_observation" not in infos[i]
            np.testing.assert_array_equal(obs[i], want.obs)
    assert steps == 2 * length + 1
    env.close()


@pytest.mark.parametrize("session", ["vector", "per_env"])
def test_seeds_are_used_once(fake_server: ServerThread, session: str) -> None:
    env = RemoteVecEnv(fake_server.url, 2, config=FAKE, session=session)
    env.seed(3)
    first = env.reset()
    pattern = FakeEnvironment(FAKE).reset(seed=0).obs
    for i in range(2):
        np.testing.assert_array_equal(first[i], pattern + np.uint8((3 + i) * 31 % 256))
    assert env._seeds == [None, None]  # SB3's rule: a seed serves the next reset only
    env.step(np.array([1, 1]))
    np.testing.assert_array_equal(env.reset(), first)  # the fake env keeps its last seed
    env.close()


@pytest.mark.parametrize("session", ["vector", "per_env"])
def test_step_async_then_wait(fake_server: ServerThread, session: str) -> None:
    env = RemoteVecEnv(fake_server.url, 2, config=FAKE, session=session)
    env.reset()
    with pytest.raises(InvalidState, match="without step_async"):
        env.step_wait()
    env.step_async(np.array([1, 2]))
    with pytest.raises(InvalidState, match="twice without step_wait"):
        env.step_async(np.array([1, 2]))
    _, rewards, _, infos = env.step_wait()
    assert rewards.tolist() == [1.0, 2.0] and rewards.dtype == np.float32
    assert [info["step"] for info in infos] == [1, 1]
    env.step_async(np.array([3, 3]))
    env.reset()  # drops the step in flight, as SB3 says reset() does
    _, rewards, _, infos = env.step(np.array([2, 1]))
    assert rewards.tolist() == [2.0, 1.0] and [info["step"] for info in infos] == [1, 1]
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.array([1, 2, 3]))
    env.close()
    env.close()


def test_attributes_and_methods(fake_server: ServerThread, atari_server: ServerThread) -> None:
    env = RemoteVecEnv(fake_server.url, 3, config=FAKE, session="per_env")
    assert env.render_mode is None and env.metadata == {"render_modes": []}
    assert env.get_attr("render_mode") == [None, None, None]
    assert env.get_attr("observation_space", indices=1) == [env.observation_space]
    assert env.get_attr("spec_extra", [0, 2])[0]["env"] == "fake"
    assert env.has_attr("action_space") and not env.has_attr("ale")
    with pytest.raises(AttributeError, match="'ale' on this side"):
        env.get_attr("ale")
    with pytest.raises(AttributeError, match="live on the server"):
        env.set_attr("frameskip", 2)
    assert env.env_method("get_action_meanings", indices=[2]) == [["A0", "A1", "A2", "A3"]]
    with pytest.raises(AttributeError, match="compute_reward"):
        env.env_method("compute_reward", 1, 2)
    with pytest.raises(TypeError, match="no arguments"):
        env.env_method("get_action_meanings", 1)
    with pytest.raises(IndexError, match=r"not in \[0, 3\)"):
        env.get_attr("render_mode", indices=[3])
    assert env.env_is_wrapped(VecMonitor) == [False, False, False]
    with pytest.raises(ValueError, match="autoreset_mode is fixed"):
        RemoteVecEnv(fake_server.url, 2, autoreset_mode="next_step", session="per_env")
    with pytest.raises(ValueError, match="batch_size is num_envs"):
        RemoteVecEnv(fake_server.url, 2, batch_size=1)
    with pytest.raises(ValueError, match="session='per_env'"):
        RemoteVecEnv([fake_server.url, fake_server.url], 2)
    with pytest.raises(ValueError, match="session must be one of"):
        RemoteVecEnv(fake_server.url, 2, session="pool")
    with pytest.raises(EnvConfigError, match="needs RGB image observations"):
        RemoteVecEnv(fake_server.url, 2, render_mode="rgb_array", session="per_env")
    env.close()
    rgb = RemoteVecEnv(atari_server.url, 2, config={"game": "pong"}, render_mode="rgb_array")
    assert rgb.metadata["render_modes"] == ["human", "rgb_array"]
    obs = rgb.reset()
    image = rgb.render()
    assert image is not None and image.shape == (420, 160, 3)  # SB3 tiles the two frames
    np.testing.assert_array_equal(image[210:], obs[1])
    np.testing.assert_array_equal(rgb.env_method("render", indices=0)[0], obs[0])
    rgb.close()


@pytest.mark.parametrize("session", ["vector", "per_env"])
def test_vec_monitor_counts_episodes(fake_server: ServerThread, session: str) -> None:
    """SB3's VecMonitor on top records each episode's return and length at its end."""
    env = VecMonitor(RemoteVecEnv(fake_server.url, 2, config=FAKE, session=session))
    env.reset()
    episodes = []
    for _ in range(2 * FAKE["episode_length"]):
        *_, infos = env.step(np.array([1, 3]))
        episodes += [info["episode"] for info in infos if "episode" in info]
    assert [(e["r"], e["l"]) for e in episodes] == [(3.0, 3), (9.0, 3)] * 2
    env.close()


def test_sb3_env_checker_passes_on_remote_env(atari_server: ServerThread) -> None:
    """SB3's own check_env on the single env the adapter's sessions are made of."""
    env = RemoteEnv(atari_server.url, config={"game": "breakout", "obs_type": "ram"})
    sb3_check_env(env)
    env.close()
