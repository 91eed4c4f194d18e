"""Continuous actions through one vector session: Pendulum-v1 and HalfCheetah-v5 served by
id, stepped by ``gymnasium.make_vec`` (RemoteVectorEnv) and by SB3's RemoteVecEnv, equal to
Gymnasium's SyncVectorEnv of the same envs, seeds and actions; actions that are not rows of
the Box refused with a clear error while the session goes on."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from openenv_ws.client import VectorSessionClient
from openenv_ws.envs.gymnasium import gymnasium_factory
from openenv_ws.errors import RemoteEnvError
from openenv_ws.gym import ENV_ID, RemoteVectorEnv
from openenv_ws.protocol import Send, Step
from openenv_ws.server import ServerLimits, ServerThread, create_app

N = 3
STEPS = 40


@pytest.fixture(scope="module")
def gym_server() -> Iterator[ServerThread]:
    with ServerThread(create_app(gymnasium_factory, limits=ServerLimits(max_sessions=8))) as server:
        yield server


def _reference(env_id: str) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gymnasium.make(env_id) for _ in range(N)])


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "HalfCheetah-v5"])
def test_make_vec_equals_sync_vector_env(gym_server: ServerThread, env_id: str) -> None:
    remote = gymnasium.make_vec(ENV_ID, num_envs=N, url=gym_server.url, config={"id": env_id})
    reference = _reference(env_id)
    try:
        assert isinstance(remote, RemoteVectorEnv)
        assert isinstance(remote.client, VectorSessionClient)  # one vector session, not N
        assert remote.single_action_space == reference.single_action_space
        obs, _ = remote.reset(seed=11)
        want, _ = reference.reset(seed=11)
        np.testing.assert_allclose(obs, want, rtol=1e-6)
        reference.single_action_space.seed(5)
        for _ in range(STEPS):
            actions = reference.action_space.sample()
            got = remote.step(actions.astype(np.float64))  # a policy's float64, cast to the Box's
            ref = reference.step(actions)
            for a, b in zip(got[:4], ref[:4], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    finally:
        remote.close()
        reference.close()


def test_sb3_vec_env_takes_box_actions(gym_server: ServerThread) -> None:
    from openenv_ws.sb3 import RemoteVecEnv

    venv = RemoteVecEnv(gym_server.url, N, config={"id": "Pendulum-v1"})
    reference = _reference("Pendulum-v1")
    try:
        venv.seed(3)
        obs = venv.reset()
        want, _ = reference.reset(seed=3)
        np.testing.assert_allclose(obs, want, rtol=1e-6)
        rng = np.random.default_rng(0)
        for _ in range(10):
            actions = rng.uniform(-2, 2, (N, 1)).astype(np.float32)
            obs, rewards, _, _ = venv.step(actions)
            want, want_rewards, *_ = reference.step(actions)
            np.testing.assert_allclose(obs, want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(rewards, want_rewards, rtol=1e-5, atol=1e-6)
    finally:
        venv.close()
        reference.close()


def test_wrong_actions_are_refused_and_the_session_goes_on(gym_server: ServerThread) -> None:
    """The client refuses what is not rows of the Box before sending; the server refuses it
    on the raw wire (a float batch for a discrete space, wrong rows, NaN, outside the
    bounds), and the next good step is served."""
    client: VectorSessionClient = VectorSessionClient(
        gym_server.url, N, config={"id": "Pendulum-v1"}
    )
    try:
        client.reset(seed=0)
        with pytest.raises(ValueError, match=r"shape \(3, 1\)"):
            client.step(np.zeros(N))
        with pytest.raises(ValueError, match="do not cast"):
            client.step(np.array([[1 + 1j]] * N))
        good = np.zeros((N, 1), np.float32)
        bad: list[tuple[Any, str]] = [
            ([0, 1, 2], "array of 3 rows"),
            (np.zeros((N + 1, 1), np.float32), "3 rows"),
            (np.full((N, 1), np.nan, np.float32), "NaN"),
            (np.full((N, 1), 3.0, np.float32), "above the space's high bound"),
            (np.zeros((N, 2), np.float32), "shape [3, 2] is not [3, 1]"),
        ]
        rid = 100
        for action, words in bad:
            rid += 1
            with pytest.raises(RemoteEnvError, match=re.escape(words)) as refused:
                client._link.roundtrip(Step(id=rid, action=action), 10.0)
            assert refused.value.code == "invalid_action"
        with pytest.raises(RemoteEnvError, match="array of 3 rows"):
            client._link.roundtrip(Send(id=rid + 1, action=[0, 1, 2]), 10.0)
        obs, rewards, *_ = client.step(good)
        assert obs.shape == (N, 3) and rewards.shape == (N,)
    finally:
        client.close()


def test_discrete_sessions_refuse_float_rows(gym_server: ServerThread) -> None:
    client: VectorSessionClient = VectorSessionClient(
        gym_server.url, N, config={"id": "CartPole-v1"}
    )
    try:
        client.reset(seed=0)
        with pytest.raises(ValueError, match="integers"):
            client.step(np.zeros(N, np.float32))
        with pytest.raises(RemoteEnvError, match="integers") as refused:
            client._link.roundtrip(Step(id=50, action=np.zeros((N, 1), np.float32)), 10.0)
        assert refused.value.code == "invalid_action"
        obs, *_ = client.step(np.ones(N, np.int64))
        assert obs.shape == (N, 4)
    finally:
        client.close()
