"""Gymnasium adapters over a real server: the checker, Gymnasium's wrappers, vector parity."""

from __future__ import annotations

import ale_py
import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from openenv_ws.errors import EnvConfigError, RemoteEnvError
from openenv_ws.gym import ENV_ID, RemoteEnv, RemoteVectorEnv
from openenv_ws.server import ServerThread

from .rollout import assert_same_rollouts, play

gymnasium.register_envs(ale_py)


@pytest.mark.parametrize("obs_type", ["rgb", "ram"])
def test_gymnasium_checker_passes(atari_server: ServerThread, obs_type: str) -> None:
    env = gymnasium.make(
        ENV_ID, url=atari_server.url, config={"game": "breakout", "obs_type": obs_type}
    )
    assert isinstance(env.unwrapped, RemoteEnv)
    check_env(env.unwrapped)  # warnings are errors in this suite, so it must be silent too
    env.close()


PREPROCESSED = [
    {"obs_type": "grayscale", "img_height": 84, "img_width": 84, "stack_num": 4},
    {
        "obs_type": "rgb",
        "img_height": 64,
        "img_width": 48,
        "stack_num": 2,
        "maxpool": True,
        "noop_max": 30,
        "episodic_life": True,
        "reward_clipping": True,
        "use_fire_reset": True,
    },
]


@pytest.mark.parametrize("preprocessing", PREPROCESSED, ids=["gray84-stack4", "rgb-all"])
def test_gymnasium_checker_passes_with_preprocessing(
    atari_server: ServerThread, preprocessing: dict[str, object]
) -> None:
    config = {"game": "breakout", **preprocessing}
    env = gymnasium.make(ENV_ID, url=atari_server.url, config=config).unwrapped
    stack, height, width = (preprocessing[k] for k in ("stack_num", "img_height", "img_width"))
    rgb = (3,) if preprocessing["obs_type"] == "rgb" else ()
    assert env.observation_space == gymnasium.spaces.Box(
        0, 255, (stack, height, width, *rgb), np.uint8
    )
    check_env(env)
    env.close()


def test_checker_passes_on_the_fake_environment(fake_server: ServerThread) -> None:
    env = gymnasium.make(ENV_ID, url=fake_server.url, config={"obs_shape": [3, 2]}).unwrapped
    assert env.action_space == gymnasium.spaces.Discrete(4)
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (3, 2), np.uint8)
    check_env(env)
    env.close()


def test_spaces_and_render(atari_server: ServerThread) -> None:
    env = RemoteEnv(atari_server.url, config={"game": "pong"}, render_mode="rgb_array")
    assert env.action_space == gymnasium.spaces.Discrete(6)
    assert env.observation_space == gymnasium.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    assert env.get_action_meanings()[:2] == ["NOOP", "FIRE"]
    obs, info = env.reset(seed=1)
    np.testing.assert_array_equal(env.render(), obs)
    assert info["lives"] == env.ale.lives()
    with pytest.raises(EnvConfigError, match="obs_type='grayscale'"):
        env.ale.getScreenGrayscale()
    env.close()
    env.close()


@pytest.mark.parametrize("grayscale", [True, False])
def test_atari_preprocessing_and_frame_stack_match_ale_py(
    atari_server: ServerThread, grayscale: bool
) -> None:
    """Gymnasium's Atari preprocessing (noop reset, frame skip 4, max-pool, 84x84, terminal
    on life loss) and frame stacking give the same frames over the wire as on ale-py's env."""
    obs_type = "grayscale" if grayscale else "rgb"
    kwargs = {"noop_max": 30, "terminal_on_life_loss": True, "grayscale_obs": grayscale}
    local = FrameStackObservation(
        AtariPreprocessing(
            gymnasium.make("ALE/Breakout-v5", frameskip=1, obs_type=obs_type), **kwargs
        ),
        4,
    )
    remote = FrameStackObservation(
        AtariPreprocessing(
            RemoteEnv(
                atari_server.url, config={"game": "breakout", "frameskip": 1, "obs_type": obs_type}
            ),
            **kwargs,
        ),
        4,
    )
    assert remote.observation_space == local.observation_space
    want, got = play(local, 5, 150), play(remote, 5, 150)
    assert len(want) > 150  # life losses ended episodes along the way
    assert_same_rollouts(got, want)
    local.close()
    remote.close()


def test_frame_skip_on_both_sides_is_refused(atari_server: ServerThread) -> None:
    env = RemoteEnv(atari_server.url, config={"game": "pong"})  # server frameskip 4
    with pytest.raises(ValueError, match="frame-skipping"):
        AtariPreprocessing(env)
    env.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_equals_gymnasium_sync_vector_env(
    atari_server: ServerThread, mode: AutoresetMode
) -> None:
    n, seed = 3, 21
    local = gymnasium.make_vec(
        "ALE/Breakout-v5",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        obs_type="ram",
        max_episode_steps=20,
    )
    remote = RemoteVectorEnv(  # one session per env, each an ale-py env like the local ones
        atari_server.url,
        n,
        config={"game": "breakout", "obs_type": "ram", "max_episode_steps": 20},
        autoreset_mode=mode,
        session="per_env",
    )
    assert remote.metadata["autoreset_mode"] == mode
    assert remote.observation_space == local.observation_space
    assert remote.action_space == local.action_space
    obs_l, _ = local.reset(seed=seed)
    obs_r, _ = remote.reset(seed=seed)
    np.testing.assert_array_equal(obs_r, obs_l)
    rng = np.random.default_rng(seed)
    ends = 0
    for t in range(50):
        actions = rng.integers(0, 4, n)
        want = local.step(actions)
        got = remote.step(actions)
        for k in range(4):
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"t={t} item {k}")
        np.testing.assert_array_equal(got[4]["lives"], want[4]["lives"])
        if mode == AutoresetMode.SAME_STEP and want[3].any():
            for i in np.flatnonzero(want[3]):
                np.testing.assert_array_equal(got[4]["final_obs"][i], want[4]["final_obs"][i])
        ends += int(want[3].sum())
    assert ends >= n * 2
    local.close()
    remote.close()


def test_vector_env_reset_mask_in_disabled_mode(fake_server: ServerThread) -> None:
    envs = RemoteVectorEnv(
        fake_server.url,
        2,
        config={"episode_length": 1},
        autoreset_mode="disabled",
        session="per_env",  # a vector session always autoresets
    )
    envs.reset(seed=0)
    _, _, terms, _, _ = envs.step(np.array([1, 1]))
    assert terms.tolist() == [True, True]
    _, infos = envs.reset(options={"reset_mask": np.array([False, True])})
    assert infos["_step"].tolist() == [False, True]
    with pytest.raises(RemoteEnvError, match="env 0") as info:
        envs.step(np.array([0, 2]))  # env 0 ended and was not reset
    assert info.value.code == "episode_over" and not getattr(info.value, "__notes__", None)
    envs.reset(options={"reset_mask": np.array([True, True])})
    _, rewards, _, _, _ = envs.step(np.array([3, 3]))
    assert rewards.tolist() == [3.0, 3.0]
    envs.close()
