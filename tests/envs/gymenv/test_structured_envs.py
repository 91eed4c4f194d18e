"""Gymnasium environments with Tuple, Dict, Text and MuJoCo Box spaces, served by id, equal
``gymnasium.make`` in-process for 500 steps with the same seeds and actions.

Each test opens a session on a real server (``--env gymnasium``; the ids beyond the
default list allowed through :data:`IDS_ENV`) through the Gymnasium adapter
:class:`~openenv_ws.gym.RemoteEnv`, whose spaces must be the environment's own, and
steps it beside the same environment made in-process, across episode ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from openenv_ws.client import EnvClient
from openenv_ws.envs.gymnasium import DEFAULT_IDS, IDS_ENV, gymnasium_factory
from openenv_ws.gym import RemoteEnv
from openenv_ws.server import ServerThread, create_app

from . import textenvs

STEPS = 500
POINT_MAZE = "gymnasium_robotics:PointMaze_UMaze-v3"
EXTRA_IDS = (POINT_MAZE, textenvs.TYPING, textenvs.ALL_SPACES)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with (
        pytest.MonkeyPatch.context() as patch,
        ServerThread(create_app(gymnasium_factory)) as srv,
    ):
        patch.setenv(IDS_ENV, ",".join((*DEFAULT_IDS, *EXTRA_IDS)))
        yield srv


def assert_same(got: Any, want: Any, space: gymnasium.Space[Any], where: str = "obs") -> None:
    """`got` equals `want` in Gymnasium's form: arrays of the same dtype and values,
    dicts with the same keys in the order of the Dict `space`, tuples as tuples."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {got!r} is not an array"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} is not {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(space, gymnasium.spaces.Dict) and set(want) == set(space.keys())
        assert isinstance(got, dict) and list(got) == list(space.keys()), f"{where}: {got!r}"
        for key in want:
            assert_same(got[key], want[key], space[key], f"{where}[{key!r}]")
    elif isinstance(want, tuple):
        assert isinstance(space, gymnasium.spaces.Tuple)
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: {got!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, space[i], f"{where}[{i}]")
    else:
        assert type(got) in (int, float, str, bool), f"{where}: {type(got).__name__}"
        assert got == want, f"{where}: {got!r} != {want!r}"


def play_both(
    url: str, env_id: str, *, kwargs: dict[str, Any] | None = None, seed: int = 11
) -> int:
    """Step `env_id` remotely and in-process with the same seeds and actions (sampled from the
    action space); returns the number of episodes that ended."""
    local = gymnasium.make(env_id, **(kwargs or {}))
    remote = RemoteEnv(url, config={"id": env_id, "kwargs": kwargs or {}})
    try:
        assert remote.observation_space == local.observation_space
        assert remote.action_space == local.action_space
        local.action_space.seed(seed)
        want, _ = local.reset(seed=seed)
        got, _ = remote.reset(seed=seed)
        space = local.observation_space
        assert_same(got, want, space)
        assert remote.observation_space.contains(got)
        episodes = 0
        for i in range(STEPS):
            action = local.action_space.sample()
            want, reward, terminated, truncated, _ = local.step(action)
            got, got_reward, got_terminated, got_truncated, _ = remote.step(action)
            assert_same(got, want, space, f"step {i} obs")
            assert (got_reward, got_terminated, got_truncated) == (
                reward,
                terminated,
                truncated,
            ), f"step {i}"
            if terminated or truncated:
                episodes += 1
                seed += 1
                want, _ = local.reset(seed=seed)
                got, _ = remote.reset(seed=seed)
                assert_same(got, want, space, f"reset after step {i}")
        return episodes
    finally:
        remote.close()
        local.close()


def test_blackjack_tuple_observations(server: ServerThread) -> None:
    assert play_both(server.url, "Blackjack-v1") > 50


def test_blackjack_on_the_plain_client_is_a_list(server: ServerThread) -> None:
    local = gymnasium.make("Blackjack-v1")
    with EnvClient(server.url, config={"id": "Blackjack-v1"}) as env:
        got = env.reset(seed=4).observation
        want, _ = local.reset(seed=4)
        assert type(got) is list and got == list(want)
    local.close()


def test_halfcheetah_mujoco_box(server: ServerThread) -> None:
    kwargs = {"max_episode_steps": 150}
    assert play_both(server.url, "HalfCheetah-v5", kwargs=kwargs) >= 3


def test_point_maze_dict_observations(server: ServerThread) -> None:
    episodes = play_both(server.url, POINT_MAZE, kwargs={"max_episode_steps": 120})
    assert episodes >= 4


def test_text_observations_and_actions(server: ServerThread) -> None:
    assert play_both(server.url, textenvs.TYPING) >= 40


def test_every_space_nested_in_dicts_and_tuples(server: ServerThread) -> None:
    assert play_both(server.url, textenvs.ALL_SPACES) >= 19


@pytest.mark.parametrize("env_id", ["Taxi-v4", "FrozenLake-v1", "CliffWalking-v1"])
def test_discrete_observations(server: ServerThread, env_id: str) -> None:
    play_both(server.url, env_id)


@pytest.mark.filterwarnings("ignore:.*is probably too (low|high)")  # unbounded Boxes, as in-process
@pytest.mark.parametrize(
    "env_id", ["Blackjack-v1", "Taxi-v4", textenvs.TYPING, textenvs.ALL_SPACES, POINT_MAZE]
)
def test_gymnasium_env_checker_passes_on_the_remote_env(server: ServerThread, env_id: str) -> None:
    """Gymnasium's own check: spaces, observations in them, determinism by seed."""
    with RemoteEnv(server.url, config={"id": env_id}) as env:
        check_env(env, skip_render_check=True)
