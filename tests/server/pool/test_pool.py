"""WarmPool: environments built ahead per configuration, handed out once, refilled in the background."""

from __future__ import annotations

import threading
from typing import Any

import ale_py
import gymnasium
import numpy as np
import pytest

from atari import AtariEnvironment, atari_factory, normalize_config
from openenv_ws.environment import Environment
from openenv_ws.errors import EnvConfigError, InvalidState
from openenv_ws.footprint import DEFAULT_FOOTPRINT
from openenv_ws.server.runtime.pool import WarmPool, json_key, normalized_key
from openenv_ws.testing import FakeEnvironment

from ...conftest import UNIT

gymnasium.register_envs(ale_py)


class CountingFactory:
    """A factory that records what it built, from which thread, and whether it was closed."""

    def __init__(self) -> None:
        self.built: list[tuple[FakeEnvironment, str]] = []
        self.closed: list[FakeEnvironment] = []

    def __call__(self, config: dict[str, Any]) -> Environment:
        if config.get("n_actions") == 0:
            raise EnvConfigError("n_actions must be positive")
        env = FakeEnvironment(config)
        original = env.close

        def close() -> None:
            self.closed.append(env)
            original()

        env.close = close  # type: ignore[method-assign]
        self.built.append((env, threading.current_thread().name))
        return env


def test_pooled_environments_are_prebuilt_handed_out_once_and_refilled() -> None:
    factory = CountingFactory()
    pool = WarmPool(factory, size=2, warm=[{"n_actions": 3}], refill_delay=0).start()
    try:
        assert pool.wait_ready(timeout=10 * UNIT)
        assert pool.ready({"n_actions": 3}) == 2
        assert {thread for _, thread in factory.built} == {"openenv-ws-warm-pool"}
        first = pool.factory({"n_actions": 3})
        second = pool.factory({"n_actions": 3})
        prebuilt = [env for env, _ in factory.built[:2]]
        assert first is prebuilt[0] and second is prebuilt[1]  # in build order, never twice
        assert pool.wait_ready({"n_actions": 3}, timeout=10 * UNIT)  # refilled
        assert len(factory.built) == 4
        assert pool.stats() | {"built": 0} == {
            "size": 2,
            "ready": 2,
            "configs": 1,
            "hits": 2,
            "misses": 0,
            "built": 0,
            "failed": 0,
            "recycled": 0,
            "bytes": 2 * DEFAULT_FOOTPRINT.bytes,  # two ready, each charged the default
            "max_bytes": None,
        }
    finally:
        pool.close()
    # Unused environments are closed with the pool; handed-out ones belong to their sessions.
    assert set(map(id, factory.closed)) == {id(env) for env, _ in factory.built[2:]}


def test_a_client_configuration_is_kept_warm_only_once_one_was_given_back() -> None:
    """A config a client chose is never built by the pool until a session of it built,
    ran and gave its environment back cleanly."""
    factory = CountingFactory()
    pool = WarmPool(factory, size=2, refill_delay=0)
    config = {"episode_length": 4}
    try:
        cold = pool.factory(config)
        second = pool.factory(config)
        assert [thread for _, thread in factory.built] == [threading.current_thread().name] * 2
        assert pool.stats()["misses"] == 2 and pool.stats()["configs"] == 0
        assert pool.ready(config) == 0
        cold.reset(seed=0)
        pool.give_back(config, cold)  # it built and closed cleanly: now kept warm
        assert pool.stats()["configs"] == 1 and pool.stats()["recycled"] == 1
        assert pool.wait_ready(config, timeout=10 * UNIT)  # refilled up to size
        assert (pool.factory(config), "openenv-ws-warm-pool") not in factory.built  # recycled first
        assert second not in factory.closed
    finally:
        pool.close()


def test_refused_configs_are_not_pooled_and_keys_are_bounded() -> None:
    factory = CountingFactory()
    pool = WarmPool(factory, size=1, max_keys=2, refill_delay=0)
    try:
        with pytest.raises(EnvConfigError, match="positive"):
            pool.factory({"n_actions": 0})
        assert pool.stats()["configs"] == 0
        for n in (2, 3, 4):  # three configurations, room for two
            pool.give_back({"n_actions": n}, pool.factory({"n_actions": n}))
            assert pool.ready({"n_actions": n}) == 1
        assert pool.stats()["configs"] == 2
        assert pool.ready({"n_actions": 2}) == 0  # the least recently used was dropped
        dropped = [env for env, _ in factory.built if env.spec.action.n == 2]
        assert dropped[-1] in factory.closed
    finally:
        pool.close()


def test_the_pool_holds_at_most_its_byte_bound() -> None:
    factory = CountingFactory()
    # Room for three environments of the default footprint, five asked for.
    pool = WarmPool(factory, size=5, refill_delay=0, max_bytes=3 * DEFAULT_FOOTPRINT.bytes)
    config = {"n_actions": 3}
    try:
        pool.give_back(config, pool.factory(config))
        assert pool.wait_ready(config, timeout=1 * UNIT) is False  # never five
        assert pool.ready(config) == 3
        assert pool.stats()["bytes"] == 3 * DEFAULT_FOOTPRINT.bytes
        pool.give_back(config, factory(config))  # no room left: closed
        assert factory.closed[-1].spec.action.n == 3 and pool.ready(config) == 3
    finally:
        pool.close()


def test_a_config_that_fails_in_the_background_is_dropped() -> None:
    factory = CountingFactory()
    pool = WarmPool(factory, size=1, warm=[{"n_actions": 0}]).start()
    try:
        assert pool.wait_ready(timeout=10 * UNIT)  # nothing left to warm
        assert pool.stats()["failed"] == 1 and pool.stats()["configs"] == 0
    finally:
        pool.close()


def test_keys() -> None:
    assert json_key({"b": 1, "a": [1, 2]}) == json_key({"a": [1, 2], "b": 1})
    atari_key = normalized_key(normalize_config)
    assert atari_key({}) == atari_key({"game": "Pong", "frameskip": 4})
    assert atari_key({}) != atari_key({"game": "breakout"})
    with pytest.raises(EnvConfigError):
        atari_key({"game": "no_such_game"})


def test_unseeded_first_resets_of_pooled_emulators_differ() -> None:
    """Each pooled emulator draws its own seeds, like a fresh ale-py env."""
    pool = WarmPool(atari_factory, size=2, warm=[{"game": "pong", "obs_type": "ram"}]).start()
    try:
        assert pool.wait_ready(timeout=30 * UNIT)
        a = pool.factory({"game": "pong", "obs_type": "ram"})
        b = pool.factory({"game": "pong", "obs_type": "ram"})
        assert isinstance(a, AtariEnvironment) and isinstance(b, AtariEnvironment)
        a.reset(), b.reset()
        assert a._rng.bit_generator.state != b._rng.bit_generator.state
        a.close(), b.close()
    finally:
        pool.close()


def test_refills_wait_for_a_quiet_moment() -> None:
    """Right after a session takes an environment, nothing is built (it would hold the GIL)."""
    factory = CountingFactory()
    pool = WarmPool(factory, size=1, warm=[{}], refill_delay=3600).start()
    try:
        assert pool.wait_ready(timeout=10 * UNIT)  # the warm config is built at once
        pool.factory({})
        assert not pool.wait_ready(timeout=0.2 * UNIT)
        assert len(factory.built) == 1 and pool.stats()["ready"] == 0
    finally:
        pool.close()


class NoRecycling(FakeEnvironment):
    def recycle(self) -> bool:
        return False


class RecyclingFails(FakeEnvironment):
    def recycle(self) -> bool:
        raise RuntimeError("cannot")


def test_environments_given_back_are_recycled_and_handed_out_again() -> None:
    factory = CountingFactory()
    pool = WarmPool(factory, size=1, refill_delay=3600)
    config = {"n_actions": 3}
    try:
        env = pool(config)  # a miss: built here
        env.reset(seed=9)
        env.step(2)
        pool.give_back(config, env)
        assert pool.stats()["recycled"] == 1 and pool.ready(config) == 1
        again = pool(config)
        assert again is env and pool.stats()["hits"] == 1
        assert again.state() == {"episode_id": None, "step_count": 0, "seed": 0}  # as built
        assert len(factory.built) == 1 and factory.closed == []

        pool.give_back(config, again)
        spare = factory(config)
        pool.give_back(config, spare)  # no room left: closed
        assert factory.closed == [spare] and pool.ready(config) == 1
        stranger = factory({"n_actions": 5})
        pool.give_back({"n_actions": 5}, stranger)  # given back cleanly: kept
        assert pool.ready({"n_actions": 5}) == 1 and len(factory.closed) == 1
    finally:
        pool.close()
    assert env in factory.closed and stranger in factory.closed  # unused again: closed
    late = factory(config)
    pool.give_back(config, late)  # after close: closed
    assert factory.closed[-1] is late


@pytest.mark.parametrize(
    ("kind", "recycle"),
    [(NoRecycling, True), (RecyclingFails, True), (FakeEnvironment, False)],
    ids=["cannot", "raises", "pool-without-recycling"],
)
def test_environments_that_do_not_recycle_are_closed(
    kind: type[FakeEnvironment], recycle: bool
) -> None:
    closed: list[Environment] = []
    pool = WarmPool(kind, size=2, refill_delay=3600, recycle=recycle)
    try:
        env = pool({})
        env.close = lambda: closed.append(env)  # type: ignore[method-assign]
        pool.give_back({}, env)
        assert closed == [env] and pool.ready({}) == 0 and pool.stats()["recycled"] == 0
    finally:
        pool.close()


_RECYCLE_CONFIGS = [
    {"game": "pong", "obs_type": "rgb"},
    {"game": "breakout", "obs_type": "grayscale", "mode": 4, "difficulty": 1},
    {"game": "pong", "obs_type": "ram", "frameskip": [2, 5], "max_episode_steps": 150},
]


def _episode(env: AtariEnvironment, seed: int, steps: int) -> list[Any]:
    first = env.reset(seed=seed)
    out: list[Any] = [first.obs.tobytes(), sorted(first.info.items())]
    n = env.spec.action.n
    for action in np.random.default_rng(seed).integers(0, n, steps).tolist():
        r = env.step(action)
        out.append((r.obs.tobytes(), r.reward, r.terminated, r.truncated, sorted(r.info.items())))
        if r.done:
            r = env.reset()
            out.append(("reset", len(r.info)))
    return out


@pytest.mark.parametrize("config", _RECYCLE_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_a_recycled_emulator_plays_exactly_like_a_new_one(config: dict[str, Any]) -> None:
    used = AtariEnvironment(config)
    _episode(used, 3, 120)
    used.snapshot()
    used.restore(used.snapshot())
    used.step(1)
    before = used._rng.bit_generator.state
    assert used.recycle()
    assert used._rng.bit_generator.state != before  # new random seeds, like a new instance
    assert used.state()["step_count"] == 0 and used.state()["episode_id"] is None
    with pytest.raises(InvalidState) as info:
        used.step(0)
    assert info.value.code == "not_reset"
    assert used.spec == AtariEnvironment(config).spec
    fresh = AtariEnvironment(config)
    assert _episode(used, 11, 200) == _episode(fresh, 11, 200)
    used.close(), fresh.close()
    assert not used.recycle()  # closed: nothing to recycle


@pytest.mark.parametrize("game", ["berzerk", "double_dunk"])
def test_games_whose_load_state_cannot_be_rebuilt_do_not_recycle(game: str) -> None:
    env = AtariEnvironment({"game": game, "obs_type": "ram"})
    assert env._post_load is None  # its load presses buttons, drawing from the generator
    assert not env.recycle()
    env.close()
