"""Small drop-in fixes: make without url for a Gymnasium id, spec.max_episode_steps, a config
given as a string, and the vector render refusal."""

from __future__ import annotations

import gymnasium
import pytest

from openenv_ws.errors import EnvConfigError
from openenv_ws.gym import ENV_ID, RemoteVectorEnv
from openenv_ws.server import ServerThread


def test_make_without_url_serves_a_gymnasium_id_and_knows_its_step_limit() -> None:
    env = gymnasium.make("openenv_ws.gym:" + ENV_ID, config={"id": "CartPole-v1"})
    assert env.spec is not None and env.spec.max_episode_steps == 500  # CartPole-v1's
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)
    env.close()


def test_atari_step_limit_reaches_the_spec(atari_server: ServerThread) -> None:
    config = {"game": "pong", "obs_type": "ram", "max_episode_steps": 7}
    env = gymnasium.make(ENV_ID, url=atari_server.url, config=config)
    assert env.spec is not None and env.spec.max_episode_steps == 7
    env.close()


def test_a_config_string_is_refused_with_the_mapping_to_give(fake_server: ServerThread) -> None:
    with pytest.raises(EnvConfigError, match=r"\{'id': 'CartPole-v1'\}"):
        gymnasium.make(ENV_ID, url=fake_server.url, config="CartPole-v1")
    with pytest.raises(EnvConfigError, match="mapping"):
        gymnasium.make_vec(ENV_ID, 2, url=fake_server.url, config="CartPole-v1")


def test_vector_render_refusal_does_not_ask_for_what_was_set(fake_server: ServerThread) -> None:
    with pytest.raises(EnvConfigError) as refused:
        RemoteVectorEnv(fake_server.url, 2, config={"obs_shape": [2]}, render_mode="rgb_array")
    message = str(refused.value)
    assert "'render': true" not in message and "leave render_mode out" in message
