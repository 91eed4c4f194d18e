"""VectorSessionClient's contract: bad inputs raise clear errors before anything is
sent and the session goes on; ops in the wrong state say what to do instead;
server refusals raise the usual errors; exports, repr and closing."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import openenv_ws
from openenv_ws import InvalidState, RemoteEnvError, VectorSessionClient
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

PONG = {"game": "pong", "num_threads": 1}


@pytest.fixture(scope="module")
def atari() -> Iterator[ServerThread]:
    from atari import atari_factory

    limits = ServerLimits(max_sessions=64, max_envs=8)
    with ServerThread(create_app(atari_factory, limits=limits)) as running:
        yield running


@pytest.fixture(scope="module")
def fake() -> Iterator[ServerThread]:
    limits = ServerLimits(max_sessions=32, max_envs=8)
    with ServerThread(create_app(fake_factory, limits=limits)) as running:
        yield running


def test_exported_from_the_package_and_the_client_package() -> None:
    assert openenv_ws.VectorSessionClient is openenv_ws.client.VectorSessionClient
    assert "VectorSessionClient" in openenv_ws.__all__
    assert "VectorSessionClient" in openenv_ws.client.__all__


@pytest.mark.parametrize(
    "num_envs, kwargs, message",
    [
        (0, {}, "num_envs must be an integer of at least 1"),
        (2.0, {}, "num_envs must be an integer"),
        (4, {"batch_size": 5}, r"batch_size must be an integer in 1\.\.4"),
        (4, {"batch_size": 0}, r"batch_size must be an integer in 1\.\.4"),
        (4, {"autoreset_mode": "disabled"}, "autoreset_mode must be 'next_step' or 'same_step'"),
    ],
)
def test_bad_arguments_fail_before_connecting(
    num_envs: object, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        VectorSessionClient("ws://127.0.0.1:9", num_envs, **kwargs)  # type: ignore[arg-type]


def test_bad_actions_raise_and_the_session_goes_on(fake: ServerThread) -> None:
    with VectorSessionClient(fake.url, 3) as envs:
        envs.reset(seed=1)
        for actions, message in [
            (0, r"shape \(3,\)"),
            ([1, 2], r"shape \(3,\).*got \(2,\)"),
            (np.zeros((3, 1), np.int64), r"shape \(3,\).*got \(3, 1\)"),
            (np.zeros(3), "actions must be integers.*float64"),
            ([True, False, True], "actions must be integers.*bool"),
            (["a", "b", "c"], "actions must be integers"),
        ]:
            with pytest.raises(ValueError, match=message):
                envs.step(actions)  # type: ignore[arg-type]
        assert envs.state()["step_count"] == 0  # nothing was sent
        # An action outside the space: the server's refusal, then the session goes on.
        with pytest.raises(RemoteEnvError) as refused:
            envs.step([0, 9, 0])
        assert refused.value.code == "invalid_action" and "9" in refused.value.message
        obs, rewards, *_ = envs.step(np.array([1, 2, 3], np.uint8))
        assert obs.shape == (3, *envs.spec.observation.shape) and rewards.dtype == np.float64
        assert envs.state()["step_count"] == 1


def test_ops_in_the_wrong_state(fake: ServerThread) -> None:
    with VectorSessionClient(fake.url, 2) as envs:
        with pytest.raises(InvalidState, match="recv\\(\\) without a pending send"):
            envs.recv()
        with pytest.raises(InvalidState, match="reset\\(\\) first"):
            envs.send([0, 0])
        with pytest.raises(RemoteEnvError) as early:
            envs.step([0, 0])
        assert early.value.code == "not_reset"
        envs.reset()
        envs.send([1, 1])
        with pytest.raises(InvalidState, match="send\\(\\) while a send\\(\\) awaits"):
            envs.send([1, 1])
        for op in (envs.step, lambda _: envs.reset()):
            with pytest.raises(InvalidState, match="recv\\(\\) it first"):
                op([1, 1])
        _, _, _, _, infos = envs.recv()
        assert infos["env_id"].tolist() == [0, 1] and infos["step"].tolist() == [1, 1]
        with pytest.raises(
            ValueError, match=r"env_ids must be the envs of the last batch \[0, 1\]"
        ):
            envs.send([0, 0], [1])
        with pytest.raises(ValueError, match=r"env ids \[0, 0\] repeat an env"):
            envs.send([0, 0], [0, 0])
        with pytest.raises(ValueError, match=r"env id 5 is not an integer in \[0, 2\)"):
            envs.reset(env_ids=[5])
        assert envs.step([2, 3])[4]["step"].tolist() == [2, 2]


def test_asynchronous_session_refuses_step_and_partial_reset(atari: ServerThread) -> None:
    with VectorSessionClient(atari.url, 4, batch_size=2, config=PONG) as envs:
        assert envs.asynchronous
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (2, 210, 160, 3) and len(infos["env_id"]) == 2
        with pytest.raises(InvalidState, match="step\\(\\) is for synchronous sessions"):
            envs.step([0, 0, 0, 0])
        with pytest.raises(InvalidState, match=r"reset\(env_ids=\.\.\.\) is for synchronous"):
            envs.reset(env_ids=[0])
        with pytest.raises(ValueError, match=r"shape \(2,\)"):
            envs.send([0, 0, 0, 0])
        # The server refuses an action outside the space at recv(); the envs of the
        # last batch still await their actions.
        envs.send([0, 99])
        with pytest.raises(RemoteEnvError) as refused:
            envs.recv()
        assert refused.value.code == "invalid_action" and not envs.pending
        envs.send(np.array([1, 1], np.int8), infos["env_id"][::-1])
        assert len(envs.recv()[1]) == 2


def test_server_refusals_raise_remote_errors(atari: ServerThread) -> None:
    with pytest.raises(RemoteEnvError) as refused:
        VectorSessionClient(atari.url, 2, config={"game": "pong", "obs_type": "ram"})
    assert refused.value.code == "bad_config" and "obs_type" in refused.value.message
    with pytest.raises(RemoteEnvError) as too_many:
        VectorSessionClient(atari.url, 9, config=PONG)
    assert too_many.value.code == "bad_config" and "num_envs" in too_many.value.message


def test_gymnasium_autoreset_mode_repr_and_closing(atari: ServerThread) -> None:
    envs = VectorSessionClient(atari.url, 2, config=PONG, autoreset_mode=AutoresetMode.SAME_STEP)
    assert envs.autoreset_mode == "same_step" == envs.spec.extra["autoreset_mode"]
    assert repr(envs).startswith("VectorSessionClient(url='ws://127.0.0.1:")
    assert "num_envs=2, batch_size=2, autoreset_mode='same_step', closed=False" in repr(envs)
    assert envs.session_id
    envs.reset(seed=0)
    envs.close()
    envs.close()  # idempotent
    assert envs.closed and "closed=True" in repr(envs)
    with pytest.raises(InvalidState, match="closed"):
        envs.step([0, 0])
