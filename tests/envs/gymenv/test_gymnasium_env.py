"""Gymnasium environments by id served remotely equal gymnasium.make in-process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest

from openenv_ws.client import EnvClient
from openenv_ws.envs.gymnasium import (
    DEFAULT_IDS,
    IDS_ENV,
    RENDER_KEY,
    GymnasiumEnvironment,
    gymnasium_plugin,
)
from openenv_ws.errors import EnvConfigError, RemoteEnvError
from openenv_ws.gym import RemoteEnv
from openenv_ws.server import ServerThread, create_app
from openenv_ws.spaces import DiscreteSpec

from . import textenvs

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
    # Some outside the Box (-2..2): Pendulum clips them, remote as in-process.
    actions = [rng.uniform(-3, 3, size=(1,)).astype(np.float32) for _ in range(STEPS)]
    _same_as_local(server.url, "Pendulum-v1", actions)


def test_id_outside_the_allow_list_is_refused(server: ServerThread) -> None:
    refused = textenvs.TYPING  # importing a module by id: not allowed unless listed
    with pytest.raises(RemoteEnvError, match=rf"'{refused}' is not allowed.*{IDS_ENV}"):
        EnvClient(server.url, config={"id": refused})


def test_bad_kwargs_are_refused(server: ServerThread) -> None:
    with pytest.raises(RemoteEnvError, match="'bogus' is not allowed for 'CartPole-v1'"):
        EnvClient(server.url, config={"id": "CartPole-v1", "kwargs": {"bogus": 1}})
    with pytest.raises(RemoteEnvError, match=r"'g' of 'Pendulum-v1' must be a number in 0\.\.100"):
        EnvClient(server.url, config={"id": "Pendulum-v1", "kwargs": {"g": "9.81"}})
    with pytest.raises(RemoteEnvError, match="unknown gymnasium environment option"):
        EnvClient(server.url, config={"id": "CartPole-v1", "seed": 1})
    with pytest.raises(
        RemoteEnvError, match=r"'render_mode' is not for a server.*\"render\": true"
    ):
        EnvClient(server.url, config={"id": "CartPole-v1", "kwargs": {"render_mode": "human"}})
    with pytest.raises(RemoteEnvError, match="option 'render' must be true or false"):
        EnvClient(server.url, config={"id": "CartPole-v1", "render": 1})


def test_spaces_without_a_wire_form_are_refused() -> None:
    plugin = gymnasium_plugin((textenvs.SEQUENCE, textenvs.DEEP))
    with ServerThread(create_app(plugin)) as srv:
        with pytest.raises(
            RemoteEnvError, match=r"observation space .* Sequence space has no form"
        ):
            EnvClient(srv.url, config={"id": textenvs.SEQUENCE})
        with pytest.raises(
            RemoteEnvError, match=r"is not carried: spaces nest deeper than 6 levels"
        ) as e:
            EnvClient(srv.url, config={"id": textenvs.DEEP})
        assert e.value.code == "bad_config"


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
            (np.zeros(2, np.float32), r"shape \[2\] is not \[1\]"),
            (np.array([np.nan], np.float32), "NaN or infinity"),
            (np.array([np.inf], np.float32), "NaN or infinity"),
            (np.array([1e300]), "NaN or infinity"),  # infinite as a float32
            (np.array([2.5], np.float32), None),  # outside the Box: Pendulum clips it
            (-3, None),
            ({"torque": 1.0}, "an array is needed, got dict"),
            ("1.0", "an array is needed, got str"),
            (np.array([1.0]), None),  # float64 where float32 is declared: converted
            (1.5, None),  # a number for a Box of shape (1,)
            ([1.0, 2.0], r"shape \[2\] is not \[1\]"),
            ([[1.0], [2.0, 3.0]], "an array is needed, got list"),
        ]
        for i, (action, message) in enumerate(bad):
            if message is None:
                assert hostile.step(action).observation.shape == (3,)
                continue
            with pytest.raises(RemoteEnvError, match=message) as caught:
                hostile.step(action)
            assert caught.value.code == "invalid_action"
            want = healthy_local.step(i % 2)  # left and right: the pole stays up
            got = healthy.step(i % 2)
            np.testing.assert_array_equal(got.observation, want[0])
        assert hostile.step(np.array([0.5], np.float32)).observation.shape == (3,)
        with pytest.raises(RemoteEnvError, match=r"2 is outside 0\.\.1"):
            healthy.step(2)
        assert healthy.step(1).observation.shape == (4,)
    healthy_local.close()


def test_pure_python_ids_run_inline_and_the_others_on_a_worker_thread() -> None:
    for config, inline in (
        ({"id": "CartPole-v1"}, True),
        ({"id": "Blackjack-v1"}, True),
        ({"id": "CartPole-v1", RENDER_KEY: True}, False),  # drawing a frame takes milliseconds
        ({"id": "HalfCheetah-v5"}, False),
    ):
        env = GymnasiumEnvironment(config)
        try:
            assert env.inline is inline, config
        finally:
            env.close()


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
    """Actions numbered from 1; the observation is the last action, twice."""

    observation_space = gymnasium.spaces.Box(-1.0, 3.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2, start=1)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert type(action) is int and action in (1, 2), action
        return np.full(2, action, np.float32), float(action), False, False, {}


def test_discrete_actions_with_a_start() -> None:
    gymnasium.register("StartAtOne-v0", entry_point=_StartAtOne)
    with (
        ServerThread(create_app(gymnasium_plugin(("StartAtOne-v0",)))) as srv,
        EnvClient(srv.url, config={"id": "StartAtOne-v0"}) as env,
    ):
        assert env.spec.action == DiscreteSpec(2, (), 1)
        env.reset(seed=0)
        assert env.step(2).observation.tolist() == [2.0, 2.0]
        for action, message in ((0, r"0 is outside 1\.\.2"), (3, "3 is outside"), (True, "bool")):
            with pytest.raises(RemoteEnvError, match=message):
                env.step(action)
        assert env.step(1).reward == 1.0


@pytest.mark.parametrize("env_id", DEFAULT_IDS)
def test_every_default_id_opens(env_id: str) -> None:
    from openenv_ws.envs.gymnasium import GymnasiumEnvironment

    env = GymnasiumEnvironment({"id": env_id})
    obs = env.reset(seed=0).obs
    assert env.spec.observation.check(obs) is None, obs
    env.close()


def test_frames_on_request_equal_in_process_render(server: ServerThread) -> None:
    plugin = gymnasium_plugin((textenvs.TYPING,))
    local = gymnasium.make(textenvs.TYPING, render_mode="rgb_array")
    local.action_space.seed(5)
    config = {"id": textenvs.TYPING, "render": True}
    with (
        ServerThread(create_app(plugin)) as srv,
        EnvClient(srv.url, config=config) as env,
        RemoteEnv(srv.url, config=config, render_mode="rgb_array") as adapter,
    ):
        local.reset(seed=5)
        frame = env.reset(seed=5).info[RENDER_KEY]
        assert (frame.dtype, frame.shape) == (np.uint8, (8, 20, 3))
        np.testing.assert_array_equal(frame, local.render())
        adapter.reset(seed=5)
        for i in range(30):  # across episode ends (12 steps at most)
            action = local.action_space.sample()
            *_, terminated, truncated, _ = local.step(action)
            want = local.render()
            np.testing.assert_array_equal(env.step(action).info[RENDER_KEY], want)
            adapter.step(action)
            np.testing.assert_array_equal(adapter.render(), want)
            if terminated or truncated:
                local.reset(seed=i)
                want = local.render()
                np.testing.assert_array_equal(env.reset(seed=i).info[RENDER_KEY], want)
                adapter.reset(seed=i)
                np.testing.assert_array_equal(adapter.render(), want)
    local.close()
    with EnvClient(server.url, config={"id": "CartPole-v1"}) as plain:
        assert RENDER_KEY not in plain.reset(seed=0).info
        with pytest.raises(EnvConfigError, match="render_mode='rgb_array' needs"):
            RemoteEnv(server.url, config={"id": "CartPole-v1"}, render_mode="rgb_array")


def test_a_failing_renderer_is_refused_without_ending_the_session() -> None:
    plugin = gymnasium_plugin((textenvs.TYPING,), {textenvs.TYPING: ("renderer",)})
    config = {"id": textenvs.TYPING, "render": True, "kwargs": {"renderer": False}}
    with ServerThread(create_app(plugin)) as srv, EnvClient(srv.url, config=config) as env:
        for _ in range(2):
            with pytest.raises(RemoteEnvError, match=r"rendering .* failed: no renderer here") as e:
                env.reset(seed=0)
            assert (e.value.code, e.value.fatal) == ("unsupported", False)
        assert env.state()["id"] == textenvs.TYPING
