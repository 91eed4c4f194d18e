"""VectorSessionClient against a live Atari server: its arrays equal in-process
``AtariVectorEnv`` with the same seed and options (synchronous sessions, both
autoreset modes, through shared memory, inline and compressed), and an
asynchronous session never loses or repeats a step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv

from openenv_ws import VectorSessionClient
from openenv_ws.server import ServerLimits, ServerThread, create_app

from ...conftest import UNIT
from ...server.vsession.test_server_atari import ATARI84, ATARI84_ENGINE
from ...server.vsession.test_server_atari import RGB_ENGINE as RGB_FULL_ENGINE

# Pong episodes cut at 600 frames (150 steps): next-step autoresets within the test.
RGB = {"game": "pong", "max_num_frames_per_episode": 600}
RGB_ENGINE = {**RGB_FULL_ENGINE, "max_num_frames_per_episode": 600}
ENGINE_MODES = {"next_step": "NextStep", "same_step": "SameStep"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    from atari import atari_factory

    limits = ServerLimits(max_sessions=64, max_envs=16)
    with ServerThread(create_app(atari_factory, limits=limits)) as running:
        yield running


def engine(game: str, n: int, mode: str, options: dict[str, Any]) -> AtariVectorEnv:
    return AtariVectorEnv(
        game,
        n,
        num_threads=2,
        frameskip=4,
        autoreset_mode=ENGINE_MODES[mode],
        **{"max_num_frames_per_episode": 108_000, **options},
    )


def squeezed(obs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The engine's observations without its stack axis of 1 (a session's have none)."""
    return obs[:, 0] if obs.ndim in (4, 5) and obs.shape[1] == 1 else obs


def check_same(got: tuple[Any, ...], want: tuple[Any, ...], mode: str) -> None:
    obs, rewards, terms, truncs, infos = got
    w_obs, w_rewards, w_terms, w_truncs, w_infos = want
    assert obs.shape == squeezed(w_obs).shape and np.array_equal(obs, squeezed(w_obs))
    assert rewards.dtype == np.float64 and np.array_equal(rewards, w_rewards)
    assert terms.dtype == np.bool_ and np.array_equal(terms, w_terms)
    assert truncs.dtype == np.bool_ and np.array_equal(truncs, w_truncs)
    for key in ("env_id", "lives", "frame_number", "episode_frame_number"):
        assert infos[key].shape == (len(obs),) and np.array_equal(infos[key], w_infos[key]), key
    ended = w_terms | w_truncs
    if mode == "same_step" and ended.any():
        # Gymnasium's SyncVectorEnv layout: an object array and its mask, final_info likewise.
        final = squeezed(w_infos["final_obs"])
        assert infos["final_obs"].dtype == object and np.array_equal(infos["_final_obs"], ended)
        assert np.array_equal(infos["_final_info"], ended)
        assert isinstance(infos["final_info"], dict)
        for r in range(len(obs)):
            if ended[r]:
                assert np.array_equal(infos["final_obs"][r], final[r])
            else:
                assert infos["final_obs"][r] is None
    else:
        assert "final_obs" not in infos and "_final_obs" not in infos


@pytest.mark.parametrize(
    "config, game, options, mode",
    [
        (RGB, "pong", RGB_ENGINE, "next_step"),
        (ATARI84, "breakout", ATARI84_ENGINE, "same_step"),
    ],
    ids=["rgb-210x160-next-step", "gray84-stack4-maxpool-same-step"],
)
def test_sync_session_equals_in_process_engine(
    server: ServerThread, config: dict[str, Any], game: str, options: dict[str, Any], mode: str
) -> None:
    n = 4
    reference = engine(game, n, mode, options)
    rng = np.random.default_rng(7)
    ends = 0
    with VectorSessionClient(
        server.url, n, config={**config, "num_threads": 2}, autoreset_mode=mode
    ) as envs:
        assert envs.shared_memory_used and envs.autoreset_mode == mode
        obs, infos = envs.reset(seed=3)
        check_same((obs, *_zeros(n), infos), _reset(reference, 3), mode)
        actions_n = envs.spec.action.n  # type: ignore[union-attr]
        for t in range(240):
            actions = rng.integers(0, actions_n, n)
            if t % 3 == 2:  # send/recv in a synchronous session: rows by env id, any order
                order = rng.permutation(n)
                envs.send(actions[order].astype(np.int32), order)
                got = envs.recv()
                back = np.argsort(got[4]["env_id"])
                got = _rows(got, back)
            else:
                got = envs.step(actions if t % 2 else actions.tolist())
            want = reference.step(actions)
            check_same(got, want, mode)
            ends += int((want[2] | want[3]).any())
        assert ends > 0, "no episode ended: autoreset went unchecked"
        state = envs.state()
        assert state["num_envs"] == n and state["step_count"] == 240
    reference.close()


def _zeros(n: int) -> tuple[Any, Any, Any]:
    return np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)


def _reset(reference: AtariVectorEnv, seed: int) -> tuple[Any, ...]:
    obs, infos = reference.reset(seed=seed)
    return (obs, *_zeros(len(obs)), infos)


def _rows(got: tuple[Any, ...], order: np.ndarray[Any, Any]) -> tuple[Any, ...]:
    """A batch's rows in `order` (infos' arrays too; an object column by its rows)."""
    obs, rewards, terms, truncs, infos = got
    infos = {k: (v[order] if isinstance(v, np.ndarray) else v) for k, v in infos.items()}
    return obs[order], rewards[order], terms[order], truncs[order], infos


@pytest.mark.parametrize(
    "transport",
    [
        {"shared_memory": False, "compression": None},
        {"shared_memory": False, "compression": "zstd"},
        {"shared_memory": True, "copy": False},
    ],
    ids=["inline", "zstd", "shared-memory-no-copy"],
)
def test_transports_give_the_same_arrays(server: ServerThread, transport: dict[str, Any]) -> None:
    n = 3
    reference = engine("pong", n, "next_step", RGB_ENGINE)
    with VectorSessionClient(server.url, n, config=RGB, **transport) as envs:
        assert envs.shared_memory_used is transport["shared_memory"]
        assert envs.compression == transport.get("compression")
        obs, infos = envs.reset(seed=8)
        check_same((obs, *_zeros(n), infos), _reset(reference, 8), "next_step")
        previous = obs
        for t in range(160):
            actions = np.full(n, t % 6, np.int64)
            got = envs.step(actions)
            check_same(got, reference.step(actions), "next_step")
            # copy=False hands out the client's buffer itself; copy=True new arrays.
            assert (got[0] is previous) is (transport.get("copy") is False)
            previous = got[0]
    reference.close()


def test_partial_reset_equals_in_process_engine(server: ServerThread) -> None:
    reference = engine("pong", 3, "next_step", RGB_ENGINE)
    with VectorSessionClient(server.url, 3, config=RGB) as envs:
        envs.reset(seed=5)
        reference.reset(seed=5)
        for _ in range(12):
            envs.step([1, 2, 3])
            reference.step(np.array([1, 2, 3]))
        obs, infos = envs.reset(seed=9, env_ids=np.array([2, 0]))
        w_obs, w_infos = reference.reset(seed=9, options={"reset_mask": np.array([1, 0, 1], bool)})
        check_same((obs, *_zeros(3), infos), (w_obs, *_zeros(3), w_infos), "next_step")
        check_same(envs.step([0, 4, 5]), reference.step(np.array([0, 4, 5])), "next_step")
    reference.close()


def test_async_session_never_loses_or_repeats_a_step(server: ServerThread) -> None:
    n, batch = 6, 3
    frames: dict[int, int] = {}  # env -> its last frame number
    came = dict.fromkeys(range(n), 0)  # env -> rows received
    sent = dict.fromkeys(range(n), 0)  # env -> actions sent

    def take(infos: dict[str, Any], terms: Any, truncs: Any) -> list[int]:
        ids = infos["env_id"].tolist()
        assert len(ids) == batch and len(set(ids)) == batch
        for row, env in enumerate(ids):
            frame = int(infos["frame_number"][row])
            # First its reset (frame 0), then one step (frameskip 4) per batch.
            assert frame == (frames[env] + 4 if env in frames else 0), (env, frame)
            frames[env] = frame
            came[env] += 1
            assert not terms[row] and not truncs[row]
        return ids

    with VectorSessionClient(
        server.url, n, batch_size=batch, config={**RGB, "num_threads": 2}, timeout=60 * UNIT
    ) as envs:
        assert envs.asynchronous and envs.spec.extra["batch_size"] == batch
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (batch, 210, 160, 3)
        ids = take(infos, np.zeros(batch, bool), np.zeros(batch, bool))
        rng = np.random.default_rng(2)
        for t in range(130):
            order = ids[::-1] if t % 2 else None
            for env in ids:
                sent[env] += 1
            envs.send(rng.integers(0, 6, batch), order)
            assert envs.pending
            obs, _, terms, truncs, infos = envs.recv()
            assert obs.shape == (batch, 210, 160, 3) and not envs.pending
            ids = take(infos, terms, truncs)
    # Every env took turns, each from its reset on.
    assert set(frames) == set(range(n)), (came, sent)
    # Every env came once for its reset, then once per action sent to it, except
    # the envs outside the last batch: their last action is still under way.
    for env in range(n):
        assert sent[env] == came[env] - 1 + (env not in ids), (env, sent[env], came[env])
    assert sum(sent.values()) == 130 * batch


def test_async_session_plays_each_env_as_a_synchronous_engine(server: ServerThread) -> None:
    """Each env of an asynchronous session, fed its own action sequence, goes through
    exactly the frames of the same env in a synchronous in-process engine."""
    n, batch, rounds = 6, 2, 90
    rng = np.random.default_rng(5)
    plan = rng.integers(0, 6, (n, rounds))  # env -> its actions, in order
    got: dict[int, list[Any]] = {env: [] for env in range(n)}
    with VectorSessionClient(
        server.url, n, batch_size=batch, config={**RGB, "num_threads": 2}, timeout=60 * UNIT
    ) as envs:
        obs, infos = envs.reset(seed=11)
        ids = infos["env_id"].tolist()
        for row, env in enumerate(ids):
            got[env].append((obs[row], 0.0, int(infos["frame_number"][row])))
        taken = dict.fromkeys(range(n), 0)
        for _ in range(rounds * n // batch - n // batch):
            actions = [plan[env, taken[env]] for env in ids]
            for env in ids:
                taken[env] += 1
            envs.send(np.array(actions), ids)
            obs, rewards, _, _, infos = envs.recv()
            ids = infos["env_id"].tolist()
            for row, env in enumerate(ids):
                got[env].append((obs[row], rewards[row], int(infos["frame_number"][row])))
    steps = min(len(v) for v in got.values()) - 1
    assert steps >= rounds - 2
    want = engine("pong", n, "next_step", RGB_ENGINE)
    try:
        w_obs, w_infos = want.reset(seed=11)
        for t in range(steps + 1):
            if t:
                w_obs, w_rewards, _, _, w_infos = want.step(plan[:, t - 1])
            for env in range(n):
                obs_t, reward_t, frame_t = got[env][t]
                assert np.array_equal(obs_t, squeezed(w_obs)[env]), (env, t)
                assert reward_t == (w_rewards[env] if t else 0.0), (env, t)
                assert frame_t == int(w_infos["frame_number"][env]), (env, t)
    finally:
        want.close()


def test_async_batch_size_must_divide_num_envs(server: ServerThread) -> None:
    from openenv_ws.errors import RemoteEnvError

    with pytest.raises(RemoteEnvError) as info:
        VectorSessionClient(server.url, 6, batch_size=4, config=RGB, timeout=60 * UNIT)
    assert info.value.code == "bad_config"
    assert "batch_size 4 must divide num_envs 6" in str(info.value)
