"""Vector envs of structured observations on a real server, equal to Gymnasium's own.

A server with the Gymnasium plugin (``--env gymnasium``; the ids beyond the default
list allowed through :data:`IDS_ENV`) hosts Blackjack-v1 (a Tuple observation),
PointMaze (a Dict of Boxes, from gymnasium-robotics) and an env holding every space
(a Dict action and observation with Text, MultiBinary, MultiDiscrete, Discrete with a
start and a Tuple). :class:`~openenv_ws.client.VectorEnvClient` and
``gymnasium.make_vec("openenv_ws/Remote-v0", ...)`` over it must hand out what
``gymnasium.vector.SyncVectorEnv`` of the same envs in-process does, with the same
seeds and actions, for hundreds of steps across episode ends, in both autoreset modes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

from openenv_ws.client import VectorEnvClient
from openenv_ws.envs.gymnasium import DEFAULT_IDS, IDS_ENV, gymnasium_factory
from openenv_ws.errors import RemoteEnvError
from openenv_ws.gym import ENV_ID, RemoteVectorEnv
from openenv_ws.gymspaces import gym_space
from openenv_ws.server import ServerThread, create_app
from tests.envs.gymenv import textenvs

N = 3
STEPS = 300
POINT_MAZE = "gymnasium_robotics:PointMaze_UMaze-v3"
#: name -> (id, gymnasium.make kwargs)
ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "blackjack": ("Blackjack-v1", {}),
    "point_maze": (POINT_MAZE, {"max_episode_steps": 40}),
    "all_spaces": (textenvs.ALL_SPACES, {}),
}
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    # MuJoCo writes MUJOCO_LOG.TXT where it runs: not in the checkout.
    with (
        pytest.MonkeyPatch.context() as patch,
        ServerThread(create_app(gymnasium_factory)) as srv,
    ):
        patch.chdir(tmp_path_factory.mktemp("vstack-cwd"))
        patch.setenv(IDS_ENV, ",".join((*DEFAULT_IDS, POINT_MAZE, textenvs.ALL_SPACES)))
        yield srv


def local_envs(name: str, mode: str) -> SyncVectorEnv:
    env_id, kwargs = ENVS[name]
    return SyncVectorEnv(
        [partial(gymnasium.make, env_id, **kwargs)] * N, autoreset_mode=MODES[mode]
    )


def config(name: str) -> dict[str, Any]:
    env_id, kwargs = ENVS[name]
    return {"id": env_id, "kwargs": kwargs}


def assert_same(got: Any, want: Any, where: str) -> None:
    """`got` is `want` in Gymnasium's layout: arrays of the same dtype, shape and values
    (object arrays item by item), dicts of the same keys, tuples as tuples; a number of
    one env's value (in ``final_obs``) may be a Python or a numpy one."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {got!r} is not an array"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{where}: {got!r} {want!r}"
        if want.dtype == object:
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                assert_same(g, w, f"{where}[{i}]")
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: {got!r} {want!r}"
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: {got!r} {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, int | np.integer) and not isinstance(want, bool):
        assert isinstance(got, int | np.integer) and got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{where}: {got!r} != {want!r}"


Reset = Callable[[int], tuple[Any, dict[str, Any]]]
Step = Callable[[Any], tuple[Any, ...]]


def play_both(
    reset: Reset, step: Step, local: SyncVectorEnv, space: gymnasium.Space[Any], seed: int
) -> int:
    """Reset and step the remote envs (`reset`, `step`) and `local` with the same seed and
    actions; every result equal; the remote observations in `space` (the batched space).
    Returns how many episodes ended."""
    got, got_info = reset(seed)
    want, want_info = local.reset(seed=seed)
    assert_same(got, want, "reset obs")
    if isinstance(want, dict):
        assert list(got) == list(want)  # the space's key order
    assert_same(got_info, want_info, "reset infos")
    local.action_space.seed(seed)
    ended = 0
    for t in range(STEPS):
        actions = local.action_space.sample()
        got_step, want_step = step(actions), local.step(actions)
        names = ("obs", "rewards", "terms", "truncs", "infos")
        for name, g, w in zip(names, got_step, want_step, strict=True):
            assert_same(g, w, f"step {t} {name}")
        assert space.contains(got_step[0]), f"step {t}: {got_step[0]!r} not in {space}"
        ended += int((want_step[2] | want_step[3]).sum())
    return ended


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ENVS)
def test_vector_env_client_equals_sync_vector_env(
    server: ServerThread, name: str, mode: str
) -> None:
    local = local_envs(name, mode)
    with VectorEnvClient(server.url, N, config=config(name), autoreset_mode=mode) as envs:
        space = batch_space(gym_space(envs.spec.observation), N)
        assert space == local.observation_space
        ended = play_both(
            lambda seed: envs.reset(seed=seed), envs.step, local, space, seed=len(name)
        )
    local.close()
    assert ended >= 5, f"only {ended} episodes ended: the test must cross episode ends"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ENVS)
def test_make_vec_equals_sync_vector_env(server: ServerThread, name: str, mode: str) -> None:
    """make_vec opens one session per env by itself: the server has no vector session
    for observations that are not one array."""
    local = local_envs(name, mode)
    envs = gymnasium.make_vec(ENV_ID, N, url=server.url, config=config(name), autoreset_mode=mode)
    try:
        assert isinstance(envs, RemoteVectorEnv) and isinstance(envs.client, VectorEnvClient)
        check_vector_env(envs, local)
        ended = play_both(
            lambda seed: envs.reset(seed=seed), envs.step, local, envs.observation_space, seed=7
        )
        assert ended >= 5, f"only {ended} episodes ended: the test must cross episode ends"
    finally:
        envs.close()
        local.close()


def check_vector_env(envs: VectorEnv[Any, Any, Any], local: SyncVectorEnv) -> None:
    """The parts of Gymnasium's vector env contract a remote env must keep."""
    assert envs.num_envs == local.num_envs
    assert envs.single_observation_space == local.single_observation_space
    assert envs.single_action_space == local.single_action_space
    assert envs.observation_space == batch_space(envs.single_observation_space, N)
    assert envs.action_space == batch_space(envs.single_action_space, N)
    assert envs.metadata["autoreset_mode"] == local.metadata["autoreset_mode"]
    obs, _ = envs.reset(seed=1)
    assert envs.observation_space.contains(obs)
    actions = envs.action_space.sample()
    assert envs.observation_space.contains(envs.step(actions)[0])


def test_make_vec_reset_mask_with_autoreset_disabled(server: ServerThread) -> None:
    """Without autoreset, ended envs are reset by mask, as SyncVectorEnv's are."""
    local = SyncVectorEnv(
        [partial(gymnasium.make, "Blackjack-v1")] * N, autoreset_mode=AutoresetMode.DISABLED
    )
    envs = RemoteVectorEnv(
        server.url, N, config=config("blackjack"), autoreset_mode="disabled", session="per_env"
    )
    try:
        assert_same(envs.reset(seed=3), local.reset(seed=3), "reset")
        local.action_space.seed(3)
        masked = 0
        for t in range(100):
            actions = local.action_space.sample()
            got, want = envs.step(actions), local.step(actions)
            assert_same(got, want, f"step {t}")
            done = want[2] | want[3]
            if done.any():
                masked += 1
                options = {"reset_mask": done}
                got_reset = envs.reset(options=dict(options))
                assert_same(got_reset, local.reset(options=dict(options)), f"reset after {t}")
        assert masked >= 5
    finally:
        envs.close()
        local.close()


def test_send_recv_rows_are_the_envs_of_env_id(server: ServerThread) -> None:
    """EnvPool style: rows in arrival order, each the row its env has in step()."""
    with (
        VectorEnvClient(server.url, N, config=config("all_spaces")) as envs,
        VectorEnvClient(server.url, N, config=config("all_spaces")) as twins,
    ):
        space = batch_space(gym_space(envs.spec.action), N)
        space.seed(0)
        envs.reset(seed=5)
        twins.reset(seed=5)
        for t in range(40):
            actions = space.sample()
            envs.send(actions)
            rows: dict[int, Any] = {}
            while len(rows) < N:
                obs, rewards, _, _, infos = envs.recv()
                for r, i in enumerate(infos["env_id"].tolist()):
                    rows[i] = (obs["pos"][r], obs["echo"][r], obs["nested"][1][r], rewards[r])
            want, want_rewards, *_ = twins.step(actions)
            for i in range(N):
                pos, echo, tail, reward = rows[i]
                np.testing.assert_array_equal(pos, want["pos"][i], err_msg=f"step {t}")
                assert (echo, tail, reward) == (
                    want["echo"][i],
                    want["nested"][1][i],
                    want_rewards[i],
                )


def test_copy_false_hands_out_the_buffers(server: ServerThread) -> None:
    with VectorEnvClient(server.url, 2, config=config("all_spaces"), copy=False) as envs:
        first, _ = envs.reset(seed=0)
        second, *_ = envs.step(batch_space(gym_space(envs.spec.action), 2).sample())
        assert second["pos"] is first["pos"] and second["nested"][0] is first["nested"][0]
        envs.copy = True
        third, *_ = envs.step(batch_space(gym_space(envs.spec.action), 2).sample())
        assert third["pos"] is not second["pos"]


def test_structured_actions_of_another_layout_are_refused_before_sending(
    server: ServerThread,
) -> None:
    with VectorEnvClient(server.url, 2, config=config("all_spaces")) as envs:
        envs.reset(seed=0)
        actions = batch_space(gym_space(envs.spec.action), 2).sample()
        with pytest.raises(ValueError, match=r"actions\['keys'\] must have a first axis of 2"):
            envs.step(actions | {"keys": actions["keys"][:1]})
        assert envs.pending == []
        envs.step(actions)  # the envs go on


def test_vector_session_refused_asks_for_sessions_per_env(server: ServerThread) -> None:
    """session='vector' asked for explicitly stays one vector session: the server's refusal."""
    with pytest.raises(RemoteEnvError, match="array observations") as refused:
        RemoteVectorEnv(server.url, 2, config=config("blackjack"), session="vector")
    assert refused.value.code == "bad_config"


def test_auto_keeps_a_refusal_of_array_observation_envs(server: ServerThread) -> None:
    """A vector session refused for another reason than structured observations is not
    replaced by sessions per env: the refusal is raised."""
    with pytest.raises(RemoteEnvError, match="batch_size") as refused:
        RemoteVectorEnv(server.url, 2, config={"id": "CartPole-v1"}, batch_size=1)
    assert refused.value.code == "bad_config"
    envs = RemoteVectorEnv(server.url, 2, config={"id": "CartPole-v1"})
    assert type(envs.client).__name__ == "VectorSessionClient"  # arrays: one vector session
    envs.close()
