"""Vector sessions of an environment without a vector engine: the server's serial fallback,
sans I/O (frames in, frames out), with the deterministic fake environment."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from openenv_ws.protocol import (
    Batch,
    Close,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Send,
    Step,
    decode_server_frame,
    encode,
)
from openenv_ws.server import ServerLimits
from openenv_ws.server.session.admission import SessionRegistry
from openenv_ws.server.session.server_session import ServerSession
from openenv_ws.testing import FakeEnvironment, fake_factory


def _session(registry: SessionRegistry | None = None, max_envs: int = 64) -> ServerSession:
    return ServerSession(
        fake_factory,
        max_frame_size=1 << 20,
        admit=None if registry is None else registry.admit,
        release=None if registry is None else registry.release,
        max_envs=max_envs,
    )


def _ask(session: ServerSession, frame: Any) -> Any:
    reply, _ = session.handle(encode(frame))
    return decode_server_frame(reply)


def test_batches_equal_single_envs_stepped_in_turn() -> None:
    session = _session()
    config = {"episode_length": 4, "obs_shape": [3, 2]}
    opened = _ask(session, Open(id=1, config=config, num_envs=3))
    assert isinstance(opened, Opened)
    assert opened.spec["num_envs"] == 3 and opened.spec["batch_size"] == 3
    assert opened.spec["observation"]["shape"] == [3, 2]
    envs = [FakeEnvironment(config) for _ in range(3)]
    first = _ask(session, Reset(id=2, seed=7))
    want = [env.reset(seed=7 + i) for i, env in enumerate(envs)]
    assert np.array_equal(first.obs, np.stack([r.obs for r in want]))
    ended = [False] * 3
    rng = np.random.default_rng(0)
    for rid in range(3, 40):
        actions = rng.integers(0, 4, 3)
        got = _ask(session, Step(id=rid, action=actions))
        assert isinstance(got, Batch), got
        assert got.env_id.tolist() == [0, 1, 2]
        for i, env in enumerate(envs):
            if ended[i]:  # next_step: the step after the end resets
                r = env.reset()
                ended[i] = False
                assert got.reward[i] == 0.0 and not got.terminated[i]
            else:
                r = env.step(int(actions[i]))
                ended[i] = r.done
                assert got.reward[i] == r.reward
                assert got.terminated[i] == r.terminated
            assert np.array_equal(got.obs[i], r.obs)


def test_same_step_mode_carries_the_final_observation() -> None:
    session = _session()
    config = {"episode_length": 2, "autoreset_mode": "same_step"}
    _ask(session, Open(id=1, config=config, num_envs=2))
    _ask(session, Reset(id=2, seed=1))
    _ask(session, Step(id=3, action=[0, 0]))
    last = _ask(session, Step(id=4, action=[1, 1]))
    assert last.terminated.tolist() == [True, True]
    single = FakeEnvironment({"episode_length": 2})
    single.reset(seed=1)
    single.step(0)
    final = single.step(1)
    assert np.array_equal(last.info["final_obs"][0], final.obs)
    assert np.array_equal(last.obs[0], single.reset().obs)
    assert last.info["step"].tolist() == [0, 0]  # the new episode's info, as Gymnasium's


@pytest.mark.parametrize(
    "frame, code, words",
    [
        (Open(id=1, num_envs=2, batch_size=1), "bad_config", "vector engine"),
        (Open(id=1, num_envs=65), "bad_config", "limit of 64"),
        (Open(id=1, num_envs=2, config={"num_threads": 2}), "bad_config", "num_threads"),
        (Open(id=1, num_envs=2, config={"autoreset_mode": "x"}), "bad_config", "autoreset_mode"),
    ],
)
def test_refused_opens(frame: Open, code: str, words: str) -> None:
    got = _ask(_session(), frame)
    assert isinstance(got, Error) and got.code == code and words in got.message, got


def test_batch_observation_bytes_are_bounded() -> None:
    session = _session(max_envs=100)
    got = _ask(session, Open(id=1, num_envs=65, config={"obs_shape": [4096, 1024]}))
    assert isinstance(got, Error) and got.code == "bad_config", got
    assert "above the limit of 268435456 bytes for one batch" in got.message
    assert isinstance(
        _ask(session, Open(id=2, num_envs=64, config={"obs_shape": [4096, 1024]})), Opened
    )


def test_each_env_counts_toward_max_sessions() -> None:
    registry = SessionRegistry(ServerLimits(max_sessions=5))
    four = _session(registry)
    assert isinstance(_ask(four, Open(id=1, num_envs=4)), Opened)
    assert registry.envs == 4
    two = _session(registry)
    refused = _ask(two, Open(id=1, num_envs=2))
    assert refused.code == "capacity" and "counts as 2" in refused.message
    one = _session(registry)
    assert isinstance(_ask(one, Open(id=1)), Opened)
    _ask(four, Close(id=2))
    four.close()  # what the transport does after the reply
    assert registry.envs == 1
    assert isinstance(_ask(_session(registry), Open(id=1, num_envs=4)), Opened)


def test_requests_out_of_turn() -> None:
    session = _session()
    _ask(session, Open(id=1, num_envs=2))
    early = _ask(session, Send(id=2, action=[0, 0]))
    assert early.code == "not_reset"
    early_partial = _ask(session, Reset(id=3, options={"env_ids": [0]}))
    assert early_partial.code == "not_reset"
    _ask(session, Reset(id=4))
    for rid, frame, code, words in [
        (5, Send(id=5, action=[0, 0], env_ids=[0, 0]), "invalid_action", "repeated"),
        (6, Send(id=6, action=[0, 0], env_ids=[0, 2]), "invalid_action", "previous batch"),
        (7, Step(id=7, action=[0]), "invalid_action", "2 integers"),
        (8, Step(id=8, action=np.zeros(2, np.float32)), "invalid_action", "float32"),
        (9, Step(id=9, action=[[0], 1]), "invalid_action", "2 integers"),
        (10, Step(id=10, action=[0, 4]), "invalid_action", "outside the action space"),
        (11, Reset(id=11, options={"env_ids": [5]}), "bad_config", "env_ids"),
        (12, Reset(id=12, options={"noop": 1}), "bad_config", "noop"),
    ]:
        got = _ask(session, frame)
        assert isinstance(got, Error) and got.id == rid and got.code == code, got
        assert words in got.message and not got.fatal
    state = _ask(session, GetState(id=13)).state
    assert state["num_envs"] == 2 and state["step_count"] == 0
    assert isinstance(_ask(session, Step(id=14, action=[1, 2])), Batch)
