"""Gymnasium environments by id served remotely equal gymnasium.make in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.envs.gymnasium import DEFAULT_IDS, IDS_ENV, gymnasium_plugin
from openenv_ws.errors import RemoteEnvError
from openenv_ws.server import ServerThread, create_app

STEPS = 500


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(gymnasium_plugin())) as srv:
        yield srv


def _same_as_local(url: str, env_id: str, actions: list[Any]) -> None:
    local = gymnasium.make(env_id)
    seed = 7
    with EnvClient(url, config={"id": env_id}) as remote:
        assert remote.spec.extra["id"] == env_id
        want, _ = local.reset(seed=seed)
        got = remote.reset(seed=seed)
        np.testing.assert_array_equal(got.observation, want)
        episodes = since_reset = 0
        for action in actions:
            want, reward, terminated, truncated, _ = local.step(action)
            got = remote.step(action)
            since_reset += 1
            assert got.observation.dtype == want.dtype
            np.testing.assert_array_equal(got.observation, want)
            assert (got.reward, got.terminated, got.truncated) == (reward, terminated, truncated)
            if terminated or truncated:
                episodes += 1
                seed += 1
                since_reset = 0
                want, _ = local.reset(seed=seed)
                np.testing.assert_array_equal(remote.reset(seed=seed).observation, want)
        state = remote.state()
        assert (state["id"], state["step_count"]) == (env_id, since_reset)
    local.close()
    if env_id == "CartPole-v1":
        assert episodes > 1  # the run crosses episode ends


def test_cartpole_equals_in_process(server: ServerThread) -> None:
    rng = np.random.default_rng(1)
    _same_as_local(server.url, "CartPole-v1", [int(a) for a in rng.integers(0, 2, STEPS)])


def test_pendulum_box_action_equals_in_process(server: ServerThread) -> None:
    rng = np.random.default_rng(2)
    actions = [rng.uniform(-2, 2, size=(1,)).astype(np.float32) for _ in range(STEPS)]
    _same_as_local(server.url, "Pendulum-v1", actions)


def test_id_outside_the_allow_list_is_refused(server: ServerThread) -> None:
    with pytest.raises(RemoteEnvError, match=rf"'Ant-v5' is not allowed.*{IDS_ENV}"):
        EnvClient(server.url, config={"id": "Ant-v5"})


def test_unsupported_space_and_bad_kwargs_are_refused(server: ServerThread) -> None:
    with pytest.raises(RemoteEnvError, match=r"observation space Tuple .* not carried yet"):
        EnvClient(server.url, config={"id": "Blackjack-v1"})
    with pytest.raises(RemoteEnvError, match="unexpected keyword argument 'bogus'"):
        EnvClient(server.url, config={"id": "CartPole-v1", "kwargs": {"bogus": 1}})
    with pytest.raises(RemoteEnvError, match="unknown gymnasium environment option"):
        EnvClient(server.url, config={"id": "CartPole-v1", "seed": 1})


def test_bad_box_actions_are_refused_and_the_sessions_go_on(server: ServerThread) -> None:
    healthy_local = gymnasium.make("CartPole-v1")
    with (
        EnvClient(server.url, config={"id": "Pendulum-v1"}) as hostile,
        EnvClient(server.url, config={"id": "CartPole-v1"}) as healthy,
    ):
        hostile.reset(seed=0)
        want, _ = healthy_local.reset(seed=3)
        np.testing.assert_array_equal(healthy.reset(seed=3).observation, want)
        bad: list[tuple[Any, str | None]] = [
            (np.zeros(2, np.float32), r"shape \[1\], got shape \[2\]"),
            (np.array([np.nan], np.float32), "finite"),
            (np.array([np.inf], np.float32), "finite"),
            ({"torque": 1.0}, "numeric array"),
            (np.array([True]), "numeric array"),
            (np.array([1.0]), None),  # float64 where float32 is declared: converted
            ([1.0, 2.0], r"shape \[1\]"),
        ]
        for action, message in bad:
            if message is None:
                assert hostile.step(action).observation.shape == (3,)
                continue
            with pytest.raises(RemoteEnvError, match=message) as caught:
                hostile.step(action)
            assert caught.value.code == "invalid_action"
            want = healthy_local.step(0)
            got = healthy.step(0)
            np.testing.assert_array_equal(got.observation, want[0])
        assert hostile.step(np.array([0.5], np.float32)).observation.shape == (3,)
        with pytest.raises(RemoteEnvError, match=r"integer in 0\.\.1"):
            healthy.step(2)
        assert healthy.step(1).observation.shape == (4,)
    healthy_local.close()


def test_kwargs_reach_gymnasium_make(server: ServerThread) -> None:
    config = {"id": "Pendulum-v1", "kwargs": {"max_episode_steps": 5, "g": 9.81}}
    with EnvClient(server.url, config=config) as env:
        env.reset(seed=0)
        results = [env.step(np.zeros(1, np.float32)) for _ in range(5)]
        assert [r.truncated for r in results] == [False] * 4 + [True]


def test_the_allow_list_comes_from_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openenv_ws.envs.gymnasium import gymnasium_factory
    from openenv_ws.errors import EnvConfigError

    monkeypatch.setenv(IDS_ENV, "Acrobot-v1, MountainCar-v0")
    gymnasium_factory({"id": "MountainCar-v0"}).close()
    with pytest.raises(EnvConfigError, match=r"'CartPole-v1' is not allowed .*Acrobot-v1, Mou"):
        gymnasium_factory({"id": "CartPole-v1"})


class _StartAtOne(gymnasium.Env[np.ndarray, int]):
    """CartPole's spaces but actions numbered from 1."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2, start=1)


def test_discrete_start_and_discrete_observations_are_refused() -> None:
    gymnasium.register("StartAtOne-v0", entry_point=_StartAtOne)
    plugin = gymnasium_plugin(("StartAtOne-v0", "Taxi-v4"))
    with ServerThread(create_app(plugin)) as srv:
        with pytest.raises(RemoteEnvError, match=r"Discrete\(start=1\) .* not carried yet"):
            EnvClient(srv.url, config={"id": "StartAtOne-v0"})
        with pytest.raises(RemoteEnvError, match=r"observation space Discrete .* not carried yet"):
            EnvClient(srv.url, config={"id": "Taxi-v4"})


@pytest.mark.parametrize("env_id", DEFAULT_IDS)
def test_every_default_id_opens_or_is_refused_as_not_carried(env_id: str) -> None:
    from openenv_ws.envs.gymnasium import GymnasiumEnvironment
    from openenv_ws.errors import EnvConfigError

    try:
        env = GymnasiumEnvironment({"id": env_id})
    except EnvConfigError as exc:
        assert "is not carried yet" in str(exc)
    else:
        assert env.reset(seed=0).obs.dtype == np.dtype(env.spec.observation.dtype)
        env.close()
