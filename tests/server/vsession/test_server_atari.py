"""Atari vector sessions on a live server, over raw protocol v1 frames: batches equal
in-process ``AtariVectorEnv`` with the same seed and options, and asynchronous sessions
never lose or repeat a step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv

from openenv_ws._shm import HEADER, ClientRegion
from openenv_ws.protocol import (
    Batch,
    Close,
    Closed,
    GetState,
    Open,
    Reset,
    Send,
    Step,
    compressed_ext_hook,
    shared_ext_hook,
)
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.wire.compress import ObsUnpacker

from ._wire import wire

RGB = {"game": "pong"}
RGB_ENGINE = {
    "img_height": 210,
    "img_width": 160,
    "grayscale": False,
    "stack_num": 1,
    "maxpool": False,
    "noop_max": 0,
    "episodic_life": False,
    "reward_clipping": False,
    "use_fire_reset": False,
    "repeat_action_probability": 0.25,
}
ATARI84 = {
    "game": "breakout",
    "obs_type": "grayscale",
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
    "maxpool": True,
    "noop_max": 30,
    # The engine starts the game over at a lost life; the session goes on, as EnvPool
    # (tests/atari/test_episodic_life.py).
    "episodic_life": False,
    "reward_clipping": True,
    "use_fire_reset": True,
}
ATARI84_ENGINE = {
    "img_height": 84,
    "img_width": 84,
    "grayscale": True,
    "stack_num": 4,
    "maxpool": True,
    "noop_max": 30,
    "episodic_life": False,
    "reward_clipping": True,
    "use_fire_reset": True,
    "repeat_action_probability": 0.25,
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    from atari import atari_factory

    limits = ServerLimits(max_sessions=64, max_envs=16)
    with ServerThread(create_app(atari_factory, limits=limits)) as running:
        yield running


def _engine(game: str, num_envs: int, mode: str, options: dict[str, Any]) -> AtariVectorEnv:
    return AtariVectorEnv(
        game,
        num_envs,
        num_threads=2,
        frameskip=4,
        full_action_space=False,
        max_num_frames_per_episode=108_000,
        autoreset_mode=mode,
        **options,
    )


def _same(got: Batch, obs: Any, reward: Any, term: Any, trunc: Any, info: dict[str, Any]) -> None:
    want_obs = obs[:, 0] if obs.shape[1] == 1 and obs.ndim in (4, 5) else obs
    assert np.array_equal(got.obs, want_obs)
    assert got.reward.dtype == np.float64 and np.array_equal(got.reward, reward)
    assert np.array_equal(got.terminated, term) and np.array_equal(got.truncated, trunc)
    assert np.array_equal(got.env_id, info["env_id"])
    for key in ("lives", "frame_number", "episode_frame_number"):
        assert np.array_equal(got.info[key], info[key]), key
    if "final_obs" in info:
        ended = term | trunc
        final = info["final_obs"]
        final = final[:, 0] if final.shape[1] == 1 else final
        assert np.array_equal(got.info["final_obs"][ended], final[ended])
        assert not got.info["final_obs"][~ended].any()


def _same_reset(got: Batch, obs: Any, info: dict[str, Any]) -> None:
    rows = len(obs)
    _same(got, obs, np.zeros(rows), np.zeros(rows, bool), np.zeros(rows, bool), info)


@pytest.mark.parametrize(
    "config, game, options, mode",
    [
        (RGB, "pong", RGB_ENGINE, "next_step"),
        ({**ATARI84, "autoreset_mode": "same_step"}, "breakout", ATARI84_ENGINE, "same_step"),
    ],
    ids=["rgb-210x160", "gray84-stack4-maxpool-same-step"],
)
def test_sync_batches_equal_in_process_engine(
    server: ServerThread, config: dict[str, Any], game: str, options: dict[str, Any], mode: str
) -> None:
    n = 3
    engine = _engine(game, n, {"next_step": "NextStep", "same_step": "SameStep"}[mode], options)
    rng = np.random.default_rng(5)
    ends = 0
    with wire(server.url) as ws:
        opened = ws.ok(Open(id=1, config={**config, "num_threads": 2}, num_envs=n))
        shape = list(engine.single_observation_space.shape)
        assert opened.spec["observation"]["shape"] == (shape[1:] if shape[0] == 1 else shape)
        assert (opened.spec["num_envs"], opened.spec["batch_size"]) == (n, n)
        assert opened.spec["autoreset_mode"] == mode
        _same_reset(ws.ok(Reset(id=2, seed=11)), *engine.reset(seed=11))
        n_actions = opened.spec["action"]["n"]
        for rid in range(3, 303):
            actions = rng.integers(0, n_actions, n)
            if rid % 2:  # step: one action per env, in env order
                got = ws.ok(Step(id=rid, action=actions.astype(np.uint8)))
            else:  # send: the same actions, named by env id in another order
                order = rng.permutation(n).astype(np.int32)
                got = ws.ok(Send(id=rid, action=actions[order], env_ids=order))
            assert got.id == rid
            result = engine.step(actions)
            _same(got, *result)
            ends += int("final_obs" in result[4])
        if mode == "same_step":
            assert ends > 0, "no episode ended: the final observations went unchecked"
        state = ws.ok(GetState(id=400)).state
        assert state["step_count"] == 300 and state["num_envs"] == n
        assert isinstance(ws.ask(Close(id=401)), Closed)
    engine.close()


def test_partial_reset_equals_in_process_engine(server: ServerThread) -> None:
    engine = _engine("pong", 3, "NextStep", RGB_ENGINE)
    with wire(server.url) as ws:
        ws.ok(Open(id=1, config=RGB, num_envs=3))
        ws.ok(Reset(id=2, seed=3))
        engine.reset(seed=3)
        for rid in range(3, 13):
            ws.ok(Step(id=rid, action=[1, 2, 3]))
            engine.step(np.array([1, 2, 3]))
        got = ws.ok(Reset(id=20, seed=9, options={"env_ids": [2, 0]}))
        mask = np.array([True, False, True])
        _same_reset(got, *engine.reset(seed=9, options={"reset_mask": mask}))
        _same(ws.ok(Step(id=21, action=[0, 1, 0])), *engine.step(np.array([0, 1, 0])))
    engine.close()


def test_async_never_loses_or_repeats_a_step(server: ServerThread) -> None:
    n, batch = 6, 2
    seen: dict[int, tuple[int, int]] = {}  # env -> (frame_number, times in a batch)
    sent = dict.fromkeys(range(n), 0)

    def take(got: Batch) -> None:
        """Each env's frame counter moves by exactly one step (frameskip 4) a batch."""
        assert got.env_id.shape == (batch,) and len(set(got.env_id.tolist())) == batch
        for row, env in enumerate(got.env_id.tolist()):
            frame = int(got.info["frame_number"][row])
            if env in seen:
                before, count = seen[env]
                assert frame == before + 4, (env, before, frame)
                seen[env] = (frame, count + 1)
            else:
                assert frame == 0 and got.info["episode_frame_number"][row] == 0
                seen[env] = (frame, 1)
            assert not got.terminated[row] and not got.truncated[row]

    with wire(server.url) as ws:
        opened = ws.ok(Open(id=1, config={**RGB, "num_threads": 2}, num_envs=n, batch_size=batch))
        assert (opened.spec["num_envs"], opened.spec["batch_size"]) == (n, batch)
        got = ws.ok(Reset(id=2, seed=0))
        rng = np.random.default_rng(1)
        for rid in range(3, 400):
            take(got)
            order = got.env_id[::-1].copy() if rid % 2 else None
            for env in (got.env_id if order is None else order).tolist():
                sent[env] += 1
            got = ws.ok(Send(id=rid, action=rng.integers(0, 6, batch), env_ids=order))
            assert got.id == rid
        take(got)
    assert sorted(seen) == list(range(n))
    # Every env came once after its reset, then once per action sent to it, except
    # the envs outside the last batch, whose last action is still under way.
    last = set(got.env_id.tolist())
    for env, (_, count) in seen.items():
        assert sent[env] == count - 1 + (env not in last), (env, sent[env], count)
    assert sum(sent.values()) == 397 * batch


def test_batches_through_shared_memory(server: ServerThread) -> None:
    region = ClientRegion(64 << 20)
    engine = _engine("pong", 4, "NextStep", RGB_ENGINE)
    shared: list[bool] = []

    def take(view: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        shared.append(True)
        return view.copy()

    try:
        with wire(server.url, {HEADER: region.offer()}) as ws:
            assert ws.ws.response.headers.get(HEADER) == "ok"
            ws.hook = shared_ext_hook(region, take)
            ws.ok(Open(id=1, config=RGB, num_envs=4))
            _same_reset(ws.ok(Reset(id=2, seed=1)), *engine.reset(seed=1))
            for rid in range(3, 23):
                actions = np.full(4, rid % 6)
                _same(ws.ok(Step(id=rid, action=actions)), *engine.step(actions))
        assert len(shared) == 21  # every batch's observations went through the region
    finally:
        region.close()
        engine.close()


def test_batches_compressed(server: ServerThread) -> None:
    engine = _engine("pong", 2, "NextStep", RGB_ENGINE)
    with wire(server.url) as ws:
        opened = ws.ok(Open(id=1, config=RGB, num_envs=2, compress=["zstd"], delta=True))
        assert opened.compress == "zstd" and opened.delta
        ws.hook = compressed_ext_hook(ObsUnpacker("zstd", True, 2 * 210 * 160 * 3))
        _same_reset(ws.ok(Reset(id=2, seed=4)), *engine.reset(seed=4))
        for rid in range(3, 43):
            actions = np.array([rid % 6, (rid + 1) % 6])
            _same(ws.ok(Step(id=rid, action=actions)), *engine.step(actions))
    engine.close()


def test_single_session_alongside(server: ServerThread) -> None:
    """A single session of the same server still plays plain results."""
    with wire(server.url) as vector, wire(server.url) as single:
        vector.ok(Open(id=1, config=RGB, num_envs=2))
        single.ok(Open(id=1, config=RGB))
        assert single.ok(Reset(id=2, seed=0)).OP == "result"
        vector.ok(Reset(id=2, seed=0))
        for rid in range(3, 20):
            assert single.ok(Step(id=rid, action=1)).obs.shape == (210, 160, 3)
            assert vector.ok(Step(id=rid, action=[1, 2])).obs.shape == (2, 210, 160, 3)
