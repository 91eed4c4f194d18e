"""The environment contract, dm_env style: one suite, every transport, two environments.

Each test is run for every transport of :data:`transports.TRANSPORTS`
(in-process, WebSocket sync through shared memory and through the socket,
WebSocket async, HTTP fallback in MessagePack and JSON, and the vector client)
and for two environments: the deterministic fake one and Atari Pong. In-process runs are the reference the
remote ones must match bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from openenv_ws.environment import ArraySpec, DiscreteSpec, EnvFactory
from openenv_ws.errors import OpenEnvError
from openenv_ws.server import ServerThread, create_app
from openenv_ws.testing import fake_factory
from tests.conformance.transports import NO_OBS, TRANSPORTS, InProcess, Outcome, Transport

# Three-step episodes: a terminal state for the fake env, a truncation for Pong.
ENVS: dict[str, Mapping[str, Any]] = {
    "fake": {"episode_length": 3, "obs_shape": [6, 5], "n_actions": 4},
    "atari": {"game": "pong", "max_episode_steps": 3},
}
ACTIONS = [1, 3, 2, 0, 2, 1]

Make = Callable[[], Transport]


def _atari_factory(config: dict[str, Any]) -> Any:
    from atari import atari_factory

    return atari_factory(config)


FACTORIES: dict[str, EnvFactory] = {"fake": fake_factory, "atari": _atari_factory}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ServerThread]]:
    with (
        ServerThread(create_app(fake_factory)) as fake,
        ServerThread(create_app(_atari_factory)) as atari,
    ):
        yield {"fake": fake, "atari": atari}


@pytest.fixture(params=list(ENVS))
def env_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def _sessions(open_transport: Callable[[], Transport]) -> Iterator[Make]:
    """A maker of sessions that closes every session it made when the test ends."""
    opened: list[Transport] = []

    def open_one() -> Transport:
        opened.append(open_transport())
        return opened[-1]

    yield open_one
    for transport in opened:
        transport.close()
        transport.dispose()


def _remote(name: str, server: ServerThread, env_name: str) -> Iterator[Make]:
    return _sessions(lambda: TRANSPORTS[name](server.url, FACTORIES[env_name], ENVS[env_name]))


@pytest.fixture(params=list(TRANSPORTS))
def make(
    request: pytest.FixtureRequest, servers: dict[str, ServerThread], env_name: str
) -> Iterator[Make]:
    """Opens sessions over the transport under test; all are closed after the test."""
    yield from _remote(request.param, servers[env_name], env_name)


@pytest.fixture(params=[name for name in TRANSPORTS if name in NO_OBS])
def make_no_obs(
    request: pytest.FixtureRequest, servers: dict[str, ServerThread], env_name: str
) -> Iterator[Make]:
    """As :func:`make`, for the transports that can step without an observation."""
    yield from _remote(request.param, servers[env_name], env_name)


@pytest.fixture
def reference(env_name: str) -> Iterator[Make]:
    """In-process sessions: what every transport must reproduce."""
    yield from _sessions(lambda: InProcess(FACTORIES[env_name], ENVS[env_name]))


def play(session: Transport, seed: int, actions: list[int]) -> list[Outcome]:
    out = [session.reset(seed=seed)]
    for action in actions:
        if out[-1].done:
            out.append(session.reset())
        else:
            out.append(session.step(action))
    return out


def assert_same(a: list[Outcome], b: list[Outcome]) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.obs is not None and y.obs is not None
        assert x.obs.dtype == y.obs.dtype and x.obs.shape == y.obs.shape, i
        assert np.array_equal(x.obs, y.obs), f"observation {i} differs"
        assert (x.reward, x.terminated, x.truncated, x.done) == (
            y.reward,
            y.terminated,
            y.truncated,
            y.done,
        ), i
        assert x.info == y.info, i


def refused(call: Callable[[], object]) -> str:
    """The error code with which `call` is refused."""
    with pytest.raises(OpenEnvError) as info:
        call()
    code: str = info.value.code
    return code


# --------------------------------------------------------------------------- the contract


def test_spec_describes_the_observations(make: Make) -> None:
    session = make()
    spec = session.spec
    assert isinstance(spec.action, DiscreteSpec) and spec.action.n > 1
    assert isinstance(spec.observation, ArraySpec)
    first = session.reset(seed=0)
    assert first.obs is not None
    assert first.obs.shape == spec.observation.shape
    assert first.obs.dtype == np.dtype(spec.observation.dtype)
    assert spec.observation.low is not None and spec.observation.high is not None
    assert spec.observation.low <= first.obs.min() <= first.obs.max() <= spec.observation.high


def test_reset_starts_an_episode(make: Make) -> None:
    session = make()
    first = session.reset(seed=1, episode_id="episode-a")
    assert (first.reward, first.terminated, first.truncated, first.done) == (
        0.0,
        False,
        False,
        False,
    )
    if session.supports_state:
        state = session.state()
        assert state["episode_id"] == "episode-a" and state["step_count"] == 0


def test_step_advances_the_episode(make: Make) -> None:
    session = make()
    session.reset(seed=2)
    step = session.step(1)
    assert type(step.reward) is float
    assert step.obs is not None and step.obs.shape == session.spec.observation.shape
    if session.supports_state:
        assert session.state()["step_count"] == 1


def test_the_same_seed_gives_the_same_episode(make: Make) -> None:
    assert_same(play(make(), 5, ACTIONS), play(make(), 5, ACTIONS))


def test_a_seeded_reset_replays_the_episode_in_the_same_session(make: Make) -> None:
    session = make()
    assert_same(play(session, 8, ACTIONS[:2]), play(session, 8, ACTIONS[:2]))


def test_the_episode_is_the_one_in_process(make: Make, reference: Make) -> None:
    assert_same(play(make(), 13, ACTIONS), play(reference(), 13, ACTIONS))


def test_an_episode_ends_and_a_reset_starts_the_next(make: Make) -> None:
    session = make()
    session.reset(seed=3)
    steps = [session.step(a) for a in ACTIONS[:3]]
    assert [s.done for s in steps] == [False, False, True]
    assert steps[-1].terminated or steps[-1].truncated
    assert refused(lambda: session.step(0)) == "episode_over"
    assert not session.reset().done
    assert not session.step(1).done


def test_step_before_reset_is_refused(make: Make) -> None:
    session = make()
    assert refused(lambda: session.step(0)) == "not_reset"
    session.reset()
    assert not session.step(0).done


def test_an_invalid_action_is_refused_and_the_episode_goes_on(make: Make) -> None:
    session = make()
    session.reset(seed=4)
    assert refused(lambda: session.step(session.spec.action.n)) == "invalid_action"  # type: ignore[union-attr]
    assert refused(lambda: session.step(-1)) == "invalid_action"
    session.step(1)
    if session.supports_state:
        assert session.state()["step_count"] == 1


def test_a_step_may_leave_the_observation_out(make_no_obs: Make) -> None:
    session = make_no_obs()
    session.reset(seed=6)
    step = session.step(2, obs=False)
    assert step.obs is None and not step.done
    assert session.step(2).obs is not None


def test_close_is_idempotent_and_final(make: Make) -> None:
    session = make()
    session.reset()
    session.close()
    session.close()
    assert refused(lambda: session.step(0)) == "closed"
    assert refused(lambda: session.reset()) == "closed"
