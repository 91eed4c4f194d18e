"""VectorEnvClient against real servers: batched results, send/recv bookkeeping, autoreset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from atari import AtariEnvironment
from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.environment import Environment
from openenv_ws.errors import EnvConfigError, InvalidState, RemoteEnvError
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import FakeEnvironment, fake_factory

from ...conftest import UNIT


@pytest.fixture
def two_fake_servers() -> Iterator[tuple[ServerThread, ServerThread]]:
    apps = [create_app(fake_factory, limits=ServerLimits(max_sessions=16)) for _ in range(2)]
    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        yield a, b


class Replica:
    """In-process twins of the remote envs, stepped with the vector client's autoreset rules."""

    def __init__(self, envs: list[Environment], mode: str = "next_step") -> None:
        self.envs = envs
        self.mode = mode
        self.needs_reset = [False] * len(envs)

    def reset(self, i: int, seed: int | None) -> Any:
        self.needs_reset[i] = False
        return self.envs[i].reset(seed=seed)

    def step(self, i: int, action: int) -> tuple[Any, float, bool, bool]:
        env = self.envs[i]
        if self.needs_reset[i]:
            r = self.reset(i, None)
            return r.obs, 0.0, False, False
        r = env.step(action)
        done = r.terminated or r.truncated
        if done and self.mode == "same_step":
            return env.reset().obs, r.reward, r.terminated, r.truncated
        self.needs_reset[i] = done and self.mode == "next_step"
        return r.obs, r.reward, r.terminated, r.truncated


@pytest.mark.parametrize("obs_type", ["rgb", "ram"])
def test_batched_rollout_equals_independent_sessions(
    atari_server: ServerThread, obs_type: str
) -> None:
    """Same seeds, same actions: every row equals an in-process run of that env, autoresets included."""
    n, steps = 3, 70
    config = {"game": "breakout", "obs_type": obs_type, "max_episode_steps": 25}
    replica = Replica([AtariEnvironment(config) for _ in range(n)])
    rng = np.random.default_rng(11)
    with VectorEnvClient(atari_server.url, n, config=config) as envs:
        obs, infos = envs.reset(seed=100)
        assert obs.shape == (n, *envs.spec.observation.shape) and obs.dtype == np.uint8
        for i in range(n):
            np.testing.assert_array_equal(obs[i], replica.reset(i, 100 + i).obs)
        assert infos["_lives"].all() and infos["lives"].dtype == np.int64
        autoresets = 0
        for t in range(steps):
            actions = rng.integers(0, envs.spec.action.n, n)
            obs, rewards, terms, truncs, infos = envs.step(actions)
            for i in range(n):
                want_obs, want_r, want_term, want_trunc = replica.step(i, int(actions[i]))
                np.testing.assert_array_equal(obs[i], want_obs, err_msg=f"t={t} env={i}")
                assert (rewards[i], terms[i], truncs[i]) == (want_r, want_term, want_trunc)
            autoresets += int(truncs.sum())
        assert autoresets >= n * 2  # max_episode_steps=25 over 70 steps: two per env
    for env in replica.envs:
        env.close()


def test_send_recv_never_loses_or_duplicates_a_step(
    two_fake_servers: tuple[ServerThread, ServerThread],
) -> None:
    """Envs of different speeds on two servers; random subsets in flight; every result checked."""
    n = 6
    configs = [
        {"obs_shape": [3, 5], "episode_length": 7 + i, "step_sleep": 0.002 * UNIT * (i % 3)}
        for i in range(n)
    ]
    replica = Replica([FakeEnvironment(c) for c in configs])
    urls = [s.url for s in two_fake_servers]
    rng = np.random.default_rng(3)
    sent = [0] * n
    got = [0] * n
    with VectorEnvClient(urls, configs=configs, copy=False) as envs:
        assert envs.urls == [urls[i % 2] for i in range(n)]
        actives = [len(s.server.config.app.state.registry.active) for s in two_fake_servers]
        assert actives == [3, 3]
        obs, _ = envs.reset(seed=[5, 6, 7, 8, 9, 10])
        for i in range(n):
            np.testing.assert_array_equal(obs[i], replica.reset(i, 5 + i).obs)
        last_action = [0] * n

        def send(ids: list[int]) -> None:
            actions = rng.integers(0, 4, len(ids))
            envs.send(actions, ids)
            for i, a in zip(ids, actions.tolist(), strict=True):
                last_action[i] = a
                sent[i] += 1

        send(list(range(n)))
        partial = 0
        while min(got) < 40:
            obs, rewards, terms, truncs, infos = envs.recv(max_envs=int(rng.integers(1, 4)))
            ids = infos["env_id"].tolist()
            assert len(ids) == len(set(ids)) and 1 <= len(ids) <= 3
            partial += len(ids) < len(envs.pending) + len(ids)
            for row, i in enumerate(ids):
                want_obs, want_r, want_term, want_trunc = replica.step(i, last_action[i])
                np.testing.assert_array_equal(obs[row], want_obs, err_msg=f"env {i} #{got[i]}")
                assert (rewards[row], terms[row], truncs[row]) == (want_r, want_term, want_trunc)
                got[i] += 1
            # Resend to a random part of the answered envs; the others wait a round.
            keep = [i for i in ids if rng.random() < 0.7] or ids[:1]
            idle = [i for i in range(n) if i not in envs.pending and i not in keep]
            send(keep + idle)
        obs, rewards, terms, truncs, infos = envs.recv(min_envs=len(envs.pending))
        for row, i in enumerate(infos["env_id"].tolist()):
            want_obs, *_ = replica.step(i, last_action[i])
            np.testing.assert_array_equal(obs[row], want_obs)
            got[i] += 1
        assert envs.pending == []
        assert got == sent  # nothing lost, nothing twice
        assert partial > 0  # recv really returned partial batches


def test_a_failed_request_keeps_other_results(fake_server: ServerThread) -> None:
    with VectorEnvClient(fake_server.url, 3, config={"n_actions": 4}) as envs:
        envs.reset(seed=0)
        envs.send([1, 9, 2])  # 9 is outside env 1's action space
        with pytest.raises(RemoteEnvError) as info:
            envs.recv(min_envs=3)
        assert info.value.code == "invalid_action" and "env 1" in str(info.value)
        _, rewards, _, _, infos = envs.recv(min_envs=2)
        assert sorted(infos["env_id"].tolist()) == [0, 2]
        assert dict(zip(infos["env_id"].tolist(), rewards.tolist(), strict=True)) == {
            0: 1.0,
            2: 2.0,
        }
        _, rewards, *_ = envs.step([3, 3, 3])  # env 1 is still usable
        assert rewards.tolist() == [3.0, 3.0, 3.0]


def test_one_request_per_env_at_a_time(fake_server: ServerThread) -> None:
    with VectorEnvClient(fake_server.url, 2) as envs:
        envs.reset()
        envs.send([0], [1])
        with pytest.raises(InvalidState, match="env 1 already has a request in flight"):
            envs.send([1], [1])
        with pytest.raises(InvalidState, match="only 1 envs have a request"):
            envs.recv(min_envs=2)
        with pytest.raises(InvalidState, match="in flight"):
            envs.reset()
        _, rewards, *_ = envs.recv()
        assert rewards.tolist() == [0.0]
        with pytest.raises(ValueError, match="one action per env"):
            envs.send([0, 1, 2])
        with pytest.raises(ValueError, match="not an integer in"):
            envs.send([0], [5])


def test_same_step_autoreset_reports_the_final_observation(fake_server: ServerThread) -> None:
    config = {"episode_length": 3}
    replica = Replica([FakeEnvironment(config) for _ in range(2)], mode="same_step")
    final = FakeEnvironment(config)
    with VectorEnvClient(fake_server.url, 2, config=config, autoreset_mode="same_step") as envs:
        envs.reset(seed=4)
        replica.reset(0, 4), replica.reset(1, 5)
        final.reset(seed=4)
        for t in range(7):
            obs, rewards, terms, _, infos = envs.step([1, 2])
            expected_final = final.step(1)
            for i, a in enumerate([1, 2]):
                want_obs, want_r, want_term, _ = replica.step(i, a)
                np.testing.assert_array_equal(obs[i], want_obs)
                assert (rewards[i], terms[i]) == (want_r, want_term)
            if terms[0]:
                assert infos["_final_obs"].tolist() == [True, True]
                np.testing.assert_array_equal(infos["final_obs"][0], expected_final.obs)
                # Gymnasium's layout: a dict of arrays with _ masks, as SyncVectorEnv gives it.
                assert infos["final_info"]["step"][0] == 3
                assert infos["final_info"]["_step"].tolist() == [True, True]
                assert infos["_final_info"].tolist() == [True, True]
                assert infos["final_info"]["step"].dtype == np.int64
                final.reset()
            else:
                assert "final_obs" not in infos, t


def test_disabled_autoreset_leaves_ended_envs_to_the_caller(fake_server: ServerThread) -> None:
    with VectorEnvClient(
        fake_server.url, 2, config={"episode_length": 2}, autoreset_mode="disabled"
    ) as envs:
        envs.reset(seed=1)
        envs.step([0, 0])
        _, _, terms, *_ = envs.step([0, 0])
        assert terms.tolist() == [True, True]
        with pytest.raises(RemoteEnvError) as info:
            envs.step([0, 0])
        assert info.value.code == "episode_over" and "env 0" in str(info.value)
        assert "env 1" in " ".join(info.value.__notes__)  # both refusals are reported
        assert envs.pending == []
        _, infos = envs.reset(env_ids=[0, 1])
        assert infos["step"].tolist() == [0, 0]
        _, _, terms, *_ = envs.step([1, 1])
        assert terms.tolist() == [False, False]


def test_sessions_with_different_spaces_are_refused(fake_server: ServerThread) -> None:
    with pytest.raises(EnvConfigError, match="share their spaces"):
        VectorEnvClient(fake_server.url, configs=[{"obs_shape": [2]}, {"obs_shape": [3]}])
    with pytest.raises(RemoteEnvError, match="env 1") as info:
        VectorEnvClient(fake_server.url, configs=[{}, {"n_actions": -1}])
    assert info.value.code == "bad_config"
    with VectorEnvClient(fake_server.url, 2) as envs:  # the failed opens left nothing behind
        assert len(envs.session_ids) == 2


def test_copy_false_returns_the_preallocated_buffer(fake_server: ServerThread) -> None:
    with VectorEnvClient(fake_server.url, 2, copy=False) as envs:
        first, _ = envs.reset(seed=0)
        second, *_ = envs.step([1, 1])
        assert first is second  # one buffer, rewritten in place
    with VectorEnvClient(fake_server.url, 2) as envs:
        first, _ = envs.reset(seed=0)
        second, *_ = envs.step([1, 1])
        assert first is not second and not np.array_equal(first, second)
    envs.close()  # idempotent
    with pytest.raises(InvalidState, match="closed"):
        envs.step([0, 0])
