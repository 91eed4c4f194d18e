"""Async batches through the Gymnasium adapter: make_vec(..., batch_size=B) gives spaces of B
rows, as its results have; send/recv and EnvPool's env_id; env_id kept in sync mode too."""

from __future__ import annotations

import gymnasium
import numpy as np

from openenv_ws.gym import ENV_ID, RemoteVectorEnv
from openenv_ws.server import ServerThread

CONFIG = {"game": "pong", "obs_type": "grayscale", "img_height": 42, "img_width": 42}


def test_make_vec_with_batch_size_gives_spaces_of_the_batch(atari_server: ServerThread) -> None:
    envs = gymnasium.make_vec(ENV_ID, num_envs=4, url=atari_server.url, config=CONFIG, batch_size=2)
    assert isinstance(envs, RemoteVectorEnv) and (envs.num_envs, envs.batch_size) == (4, 2)
    assert envs.observation_space.shape == (2, 42, 42)
    assert envs.action_space == gymnasium.spaces.MultiDiscrete([6, 6])
    obs, infos = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    seen = set(infos["env_id"].tolist())
    for _ in range(4):
        obs, rewards, terms, truncs, infos = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert rewards.shape == terms.shape == truncs.shape == infos["env_id"].shape == (2,)
        seen |= set(infos["env_id"].tolist())
    assert seen == {0, 1, 2, 3}
    envs.close()


def test_send_recv_and_env_id(atari_server: ServerThread) -> None:
    envs = RemoteVectorEnv(atari_server.url, 4, config=CONFIG, batch_size=2)
    _, infos = envs.reset(seed=0)
    ids = infos["env_id"]
    envs.send(np.zeros(2, np.int64), ids[::-1])  # the same envs, in any order
    _, _, _, _, infos = envs.recv()
    assert len(infos["env_id"]) == 2 and not set(infos["env_id"]) & set(ids)
    envs.close()
    sync = RemoteVectorEnv(atari_server.url, 3, config=CONFIG)
    _, infos = sync.reset(seed=0)
    assert infos["env_id"].tolist() == [0, 1, 2]  # EnvPool's key, kept
    *_, infos = sync.step(np.zeros(3, np.int64))
    assert infos["env_id"].tolist() == [0, 1, 2]
    sync.close()
