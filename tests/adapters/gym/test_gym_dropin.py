"""Gymnasium drop-in: make_vec's vector entry point, spec and metadata, the vector env
contract next to Gymnasium's SyncVectorEnv, and clear errors for wrong action shapes."""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from openenv_ws.client import VectorEnvClient, VectorSessionClient
from openenv_ws.client._batch import stack_infos
from openenv_ws.errors import EnvConfigError
from openenv_ws.gym import ENV_ID, RemoteEnv, RemoteVectorEnv
from openenv_ws.server import ServerThread

# Episodes of different lengths, so that envs end on different steps.
CONFIGS = [{"episode_length": 2}, {"episode_length": 3}, {"episode_length": 5}]


def test_make_vec_in_a_fresh_interpreter_returns_the_vector_env(
    fake_server: ServerThread,
) -> None:
    """Gymnasium 1.x loads no plugins; its "module:id" form imports the registering module."""
    code = f"""
import sys, gymnasium
assert "openenv_ws" not in sys.modules
envs = gymnasium.make_vec(
    "openenv_ws.gym:{ENV_ID}", num_envs=3, url={fake_server.url!r}, config={{"obs_shape": [2]}}
)
obs, _ = envs.reset(seed=0)
print(type(envs).__module__, type(envs).__name__, envs.spec.id, obs.shape)
envs.close()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["openenv_ws.gym", "RemoteVectorEnv", ENV_ID, "(3,", "2)"]


def test_make_vec_uses_the_vector_entry_point(fake_server: ServerThread) -> None:
    envs = gymnasium.make_vec(
        ENV_ID, num_envs=4, url=fake_server.url, config={"n_actions": 3}, autoreset_mode="same_step"
    )
    assert isinstance(envs, RemoteVectorEnv) and envs.num_envs == 4
    assert isinstance(envs.client, VectorSessionClient)  # one vector session for the 4 envs
    assert envs.metadata == {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}
    assert envs.spec is not None and envs.spec.id == ENV_ID
    assert envs.spec.kwargs["num_envs"] == 4
    assert envs.spec.kwargs["vectorization_mode"] == "vector_entry_point"
    assert envs.action_space == gymnasium.spaces.MultiDiscrete([3, 3, 3, 3])
    envs.close()


def test_make_vec_refuses_what_the_vector_env_cannot_take(fake_server: ServerThread) -> None:
    url = fake_server.url
    with pytest.raises(gymnasium.error.Error, match="vector_kwargs"):
        gymnasium.make_vec(ENV_ID, 2, url=url, vector_kwargs={"autoreset_mode": "same_step"})
    with pytest.raises(gymnasium.error.Error, match="wrappers"):
        gymnasium.make_vec(
            ENV_ID, 2, url=url, wrappers=[gymnasium.wrappers.RecordEpisodeStatistics]
        )
    with pytest.raises(ValueError, match="needs url="):
        gymnasium.make_vec(ENV_ID, 2)
    with pytest.raises(ValueError, match="config=\\{'max_episode_steps'"):
        gymnasium.make_vec(ENV_ID, 2, url=url, max_episode_steps=10)


def test_make_vec_sync_mode_vectorizes_single_envs(fake_server: ServerThread) -> None:
    """Asked for explicitly, Gymnasium's own vectorizers run over RemoteEnv."""
    envs = gymnasium.make_vec(ENV_ID, 2, vectorization_mode="sync", url=fake_server.url)
    assert isinstance(envs, SyncVectorEnv)
    assert all(isinstance(env.unwrapped, RemoteEnv) for env in envs.envs)
    envs.close()


def test_spec_is_filled_in(fake_server: ServerThread) -> None:
    env = gymnasium.make(ENV_ID, url=fake_server.url, config={"obs_shape": [2]})
    assert env.unwrapped.spec is not None and env.unwrapped.spec.id == ENV_ID
    env.close()
    envs = RemoteVectorEnv(fake_server.url, 2, config={"obs_shape": [2]}, token="t0ken")
    assert envs.spec is not None and envs.spec.id == ENV_ID
    assert "token" not in envs.spec.kwargs
    again = gymnasium.make_vec(envs.spec)  # the spec makes the same vector env again
    assert isinstance(again, RemoteVectorEnv) and again.num_envs == 2
    assert again.observation_space == envs.observation_space
    again.close()
    envs.close()


def test_vector_render(atari_server: ServerThread, fake_server: ServerThread) -> None:
    envs = RemoteVectorEnv(atari_server.url, 2, config={"game": "pong"}, render_mode="rgb_array")
    assert envs.metadata["render_modes"] == ["rgb_array"]
    assert envs.render() is None  # nothing before the first reset
    obs, _ = envs.reset(seed=3)
    frames = envs.render()
    assert frames is not None and len(frames) == 2
    for frame, row in zip(frames, obs, strict=True):
        np.testing.assert_array_equal(frame, row)
    envs.close()
    with pytest.raises(EnvConfigError, match="needs RGB image observations"):
        RemoteVectorEnv(fake_server.url, 2, render_mode="rgb_array")


def _assert_same_infos(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    assert sorted(got) == sorted(want), where
    for key, value in want.items():
        if isinstance(value, dict):
            assert isinstance(got[key], dict), (where, key, got[key])
            _assert_same_infos(got[key], value, f"{where} {key}")
            continue
        assert isinstance(got[key], np.ndarray), (where, key)
        assert got[key].dtype == value.dtype, (where, key)
        if value.dtype == object:
            for a, b in zip(got[key], value, strict=True):
                assert (a is None) == (b is None), (where, key)
                np.testing.assert_array_equal(a, b, err_msg=f"{where} {key}")
        else:
            np.testing.assert_array_equal(got[key], value, err_msg=f"{where} {key}")


class _Infos(VectorEnv[Any, Any, Any]):
    """Just enough of a VectorEnv to call Gymnasium's own info stacking."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


INFOS: list[dict[str, Any] | None] = [
    {"lives": 3, "score": 1.5, "done": True, "name": "a", "v": np.float32(0.5)},
    None,
    {"lives": 2, "frame": np.arange(3, dtype=np.uint8), "stats": {"n": 4, "deep": {"x": 1.0}}},
    {"stats": {"n": 5}, "v": np.float32(2.0), "flag": np.bool_(True), "seeds": [1, 2]},
]


def test_info_layout_equals_gymnasium_add_info() -> None:
    """stack_infos gives what gymnasium.vector.VectorEnv._add_info gives: the same keys,
    masks, dtypes and values, nested maps included."""
    gym_env = _Infos(len(INFOS))
    want: dict[str, Any] = {}
    for i, info in enumerate(INFOS):
        want = gym_env._add_info(want, info or {}, i)
    _assert_same_infos(stack_infos(INFOS), want, "infos")


@pytest.mark.parametrize("session", ["vector", "per_env"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_contract_equals_sync_vector_env(
    fake_server: ServerThread, mode: AutoresetMode, session: str
) -> None:
    """Same envs, same seeds and actions: the same arrays, dtypes, info layout and
    final_obs/final_info as Gymnasium's SyncVectorEnv over single envs, for one vector
    session (one config for all envs) and for one session per env."""
    url = fake_server.url
    configs = CONFIGS if session == "per_env" else [CONFIGS[1]] * len(CONFIGS)
    want_env = SyncVectorEnv(
        [functools.partial(RemoteEnv, url, config=c) for c in configs], autoreset_mode=mode
    )
    if session == "per_env":
        got_env = RemoteVectorEnv(url, configs=configs, autoreset_mode=mode, session=session)
    else:
        got_env = RemoteVectorEnv(url, len(configs), config=configs[0], autoreset_mode=mode)
    assert got_env.metadata["autoreset_mode"] == want_env.metadata["autoreset_mode"]
    for name in ("single_observation_space", "single_action_space"):
        assert getattr(got_env, name) == getattr(want_env, name), name
    assert got_env.observation_space == want_env.observation_space
    assert got_env.action_space == want_env.action_space
    got, want = got_env.reset(seed=7), want_env.reset(seed=7)
    np.testing.assert_array_equal(got[0], want[0])
    if session == "vector":  # EnvPool's key, beside Gymnasium's layout: rows in env order
        assert got[1].pop("env_id").tolist() == [0, 1, 2]
    _assert_same_infos(got[1], want[1], "reset")
    rng = np.random.default_rng(7)
    finals = 0
    for t in range(12):
        actions = rng.integers(0, 4, len(CONFIGS))
        got_step, want_step = got_env.step(actions), want_env.step(actions)
        assert got_env.observation_space.contains(got_step[0])
        for k in range(4):
            g, w = np.asarray(got_step[k]), np.asarray(want_step[k])
            assert (g.dtype, g.shape) == (w.dtype, w.shape), (t, k)
            np.testing.assert_array_equal(g, w, err_msg=f"t={t} item {k}")
        if session == "vector" and "final_info" in want_step[4]:
            # A vector session's batch carries the ended envs' last observations, not the
            # infos of their last steps (SPEC section 21): final_info has the masks only.
            assert got_step[4]["final_info"] == {}
            want_step[4]["final_info"] = {}
        if session == "vector":
            assert got_step[4].pop("env_id").tolist() == [0, 1, 2]
        _assert_same_infos(got_step[4], want_step[4], f"t={t}")
        finals += "final_info" in want_step[4]
        if t == 4:  # a partial reset: the envs' episodes end on different steps from here
            mask = np.array([True, False, False])
            got, want = (
                got_env.reset(options={"reset_mask": mask}),
                want_env.reset(options={"reset_mask": mask.copy()}),
            )
            np.testing.assert_array_equal(got[0], want[0])
            if session == "vector":
                assert got[1].pop("env_id").tolist() == [0, 1, 2]
            _assert_same_infos(got[1], want[1], "partial reset")
    assert finals >= 3 if mode == AutoresetMode.SAME_STEP else finals == 0
    got_env.close()
    want_env.close()


def test_wrong_action_shapes_name_the_expected_shape(fake_server: ServerThread) -> None:
    with VectorEnvClient(fake_server.url, 3) as envs:
        envs.reset(seed=0)
        for bad, shown in [
            (0, "int"),
            (np.int64(1), "int64"),
            (np.array(2), r"\(\)"),
            ([1, 2], r"\(2,\)"),
            (np.zeros(4, np.int64), r"\(4,\)"),
        ]:
            with pytest.raises(ValueError, match=rf"shape \(3,\).*got {shown}"):
                envs.step(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"shape \(2,\)"):
            envs.send([1], env_ids=[0, 2])
        assert envs.pending == []  # nothing was sent
        _, rewards, _, _, _ = envs.step([1, 2, 3])  # and the envs still step
        assert rewards.tolist() == [1.0, 2.0, 3.0]
    gym_envs = RemoteVectorEnv(fake_server.url, 3)
    gym_envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        gym_envs.step(0)  # type: ignore[arg-type]
    gym_envs.close()
