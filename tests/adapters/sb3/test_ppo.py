"""A real, short Stable-Baselines3 PPO run on the adapter: 2,048 steps of Pong in the
Atari recipe's shape (84x84 grayscale, 4 frames stacked), CNN policy, on CPU."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

from openenv_ws.sb3 import RemoteVecEnv
from openenv_ws.server import ServerThread

CONFIG = {
    "game": "pong",
    "obs_type": "grayscale",
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
}
NUM_ENVS, N_STEPS = 8, 256


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread: the server shares this process and the machine's cores, and
    torch's threads waiting on each other there make the run several times longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_ppo_cnn_policy_runs_2048_steps(atari_server: ServerThread) -> None:
    """On one vector session (the adapter's default); tests/adapters/sb3/test_adapter.py checks
    that both kinds of session give SB3 what its own vector envs give."""
    env = VecMonitor(RemoteVecEnv(atari_server.url, NUM_ENVS, config=CONFIG))
    assert env.observation_space.shape == (4, 84, 84)  # channels first: no transposing wrapper
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=N_STEPS,
        batch_size=512,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"features_extractor_kwargs": {"features_dim": 64}},
    )
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=NUM_ENVS * N_STEPS)
    assert model.num_timesteps == 2048
    buffer = model.rollout_buffer
    assert buffer.observations.shape == (N_STEPS * NUM_ENVS, 4, 84, 84)  # flattened to train
    assert buffer.observations.any()  # real frames, not zeros
    assert set(np.unique(buffer.actions)) <= set(range(6))
    after = list(model.policy.parameters())
    changed = [not (a == b.detach()).all() for a, b in zip(before, after, strict=True)]
    assert any(changed)  # the policy was trained on what the envs returned
    env.close()
