"""AtariEnvironment on its own: config checks, spec, actions, limits, state, snapshots."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from atari import AtariEnvironment, atari_factory, games, normalize_config
from atari.config import DEFAULT_CONFIG
from openenv_ws.environment import Environment
from openenv_ws.errors import (
    BadSnapshot,
    EnvConfigError,
    InvalidAction,
    InvalidState,
    ProtocolError,
)
from openenv_ws.protocol import Opened, StateReply, decode_server_frame, encode

from .wire import through_the_wire


@pytest.fixture(scope="module")
def pong() -> Iterator[AtariEnvironment]:
    env = AtariEnvironment({"game": "pong"})
    yield env
    env.close()


# ---------------------------------------------------------------------- games and names


def test_games_lists_bundled_single_player_roms() -> None:
    ids = games()
    assert ids == sorted(ids)
    assert {"pong", "breakout", "space_invaders", "montezuma_revenge"} <= set(ids)
    assert "combat" not in ids  # multi-player only: ALE refuses it single-player
    assert len(ids) > 90


@pytest.mark.parametrize(
    ("name", "game"),
    [
        ("pong", "pong"),
        ("Pong", "pong"),
        ("ALE/Pong-v5", "pong"),
        ("SpaceInvaders", "space_invaders"),
        ("ALE/MontezumaRevenge-v5", "montezuma_revenge"),
        ("space_invaders", "space_invaders"),
    ],
)
def test_game_names_accepted(name: str, game: str) -> None:
    assert normalize_config({"game": name})["game"] == game


def test_default_config_is_ale_v5() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    import ale_py

    gymnasium.register_envs(ale_py)
    v5 = gymnasium.spec("ALE/Pong-v5").kwargs
    config = normalize_config({})
    assert set(config) == set(DEFAULT_CONFIG)
    for key in (
        "game",
        "frameskip",
        "repeat_action_probability",
        "full_action_space",
        "max_num_frames_per_episode",
    ):
        assert config[key] == v5[key], key
    assert (config["obs_type"], config["mode"], config["difficulty"]) == ("rgb", None, None)
    assert config["max_episode_steps"] is None


# ---------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"gmae": "pong"}, ["'gmae'", "known options", "game"]),
        ({"game": "pongg"}, ["'pongg'", "did you mean", "'pong'"]),
        ({"game": "spaceinvader"}, ["did you mean", "'space_invaders'"]),
        ({"game": "zzzzzz"}, ["'zzzzzz'", "games()"]),
        ({"game": "combat"}, ["multi-player"]),
        ({"game": 3}, ["'game'", "3"]),
        ({"obs_type": "rgb_array"}, ["'obs_type'", "'rgb_array'", "grayscale"]),
        ({"frameskip": 0}, ["'frameskip'", "0", "positive"]),
        ({"frameskip": 2.5}, ["'frameskip'", "2.5"]),
        ({"frameskip": True}, ["'frameskip'", "True"]),
        ({"frameskip": [5, 2]}, ["'frameskip'", "[5, 2]", "low < high"]),
        ({"frameskip": [0, 3]}, ["'frameskip'", "[0, 3]"]),
        ({"frameskip": [1, 2, 3]}, ["'frameskip'", "[1, 2, 3]"]),
        ({"repeat_action_probability": 1.5}, ["'repeat_action_probability'", "1.5", "[0, 1]"]),
        ({"repeat_action_probability": "0.25"}, ["'repeat_action_probability'", "'0.25'"]),
        ({"repeat_action_probability": False}, ["'repeat_action_probability'", "False"]),
        ({"full_action_space": 1}, ["'full_action_space'", "1", "true or false"]),
        ({"mode": -1}, ["'mode'", "-1"]),
        ({"mode": "hard"}, ["'mode'", "'hard'"]),
        ({"difficulty": 1.0}, ["'difficulty'", "1.0"]),
        ({"max_episode_steps": 0}, ["'max_episode_steps'", "0", ">= 1"]),
        ({"max_num_frames_per_episode": -5}, ["'max_num_frames_per_episode'", "-5"]),
    ],
)
def test_bad_config_names_option_value_and_what_is_allowed(
    config: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(EnvConfigError) as info:
        AtariEnvironment(config)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"mode": 99}, ["'mode'", "99", "[0, 1]"]),
        ({"difficulty": 7}, ["'difficulty'", "7", "[0, 1, 2, 3]"]),
    ],
)
def test_mode_and_difficulty_checked_against_the_game(
    config: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(EnvConfigError) as info:
        AtariEnvironment({"game": "pong", **config})
    for word in words:
        assert word in str(info.value)


# ---------------------------------------------------------------------- spec


@pytest.mark.parametrize(
    ("obs_type", "shape"), [("rgb", (210, 160, 3)), ("grayscale", (210, 160)), ("ram", (128,))]
)
def test_observation_spec_matches_observations(obs_type: str, shape: tuple[int, ...]) -> None:
    env = AtariEnvironment({"game": "breakout", "obs_type": obs_type})
    try:
        assert env.spec.observation.shape == shape
        assert (
            env.spec.observation.dtype,
            env.spec.observation.low,
            env.spec.observation.high,
        ) == (
            "uint8",
            0,
            255,
        )
        first = env.reset(seed=0)
        later = env.step(1)
        for result in (first, later):
            assert result.obs is not None
            assert result.obs.shape == shape and result.obs.dtype == np.uint8
    finally:
        env.close()


def test_spec_names_actions_and_carries_the_effective_config(pong: AtariEnvironment) -> None:
    spec = pong.spec
    assert spec.action.n == 6
    assert spec.action.meanings == ("NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE")
    assert spec.extra["env"] == "atari"
    assert spec.extra["game"] == "pong"
    assert spec.extra["config"] == normalize_config({"game": "pong"})
    assert spec.extra["legal_actions"] == list(range(6))
    assert spec.extra["modes"] == [0, 1] and spec.extra["difficulties"] == [0, 1, 2, 3]
    assert isinstance(spec.extra["lives"], int)
    # The spec must travel in an opened frame unchanged.
    frame = decode_server_frame(encode(Opened(1, session_id="s", spec=spec.to_wire())))
    assert isinstance(frame, Opened)
    assert frame.spec == spec.to_wire()


def test_full_action_space_has_all_18_actions() -> None:
    env = AtariEnvironment({"game": "pong", "full_action_space": True})
    try:
        assert env.spec.action.n == 18
        assert env.spec.action.meanings[:3] == ("NOOP", "FIRE", "UP")
        assert env.spec.action.meanings[-1] == "DOWNLEFTFIRE"
        env.reset(seed=1)
        env.step(17)
        with pytest.raises(InvalidAction, match=r"\[0, 17\]"):
            env.step(18)
    finally:
        env.close()


def test_frameskip_sets_frames_per_step() -> None:
    for frameskip in (1, 3):
        env = AtariEnvironment({"game": "pong", "frameskip": frameskip, "obs_type": "ram"})
        try:
            env.reset(seed=3)
            for k in range(1, 4):
                assert env.step(0).info["episode_frame_number"] == k * frameskip
        finally:
            env.close()


def test_stochastic_frameskip_stays_in_range() -> None:
    env = AtariEnvironment({"game": "pong", "frameskip": [2, 5], "obs_type": "ram"})
    try:
        env.reset(seed=3)
        frames = [env.step(0).info["episode_frame_number"] for _ in range(60)]
        skips = set(np.diff([0, *frames]).tolist())
        assert skips == {2, 3, 4}
        assert env.state()["frameskip"] == [2, 5]
    finally:
        env.close()


def test_mode_and_difficulty_are_applied() -> None:
    env = AtariEnvironment({"game": "breakout", "mode": 12, "difficulty": 1})
    try:
        env.reset(seed=0)
        state = env.state()
        assert (state["mode"], state["difficulty"]) == (12, 1)
        env.reset(seed=4)  # a seeded reset starts from the loaded game and must re-apply them
        assert (env.state()["mode"], env.state()["difficulty"]) == (12, 1)
    finally:
        env.close()


# ---------------------------------------------------------------------- actions and results


@pytest.mark.parametrize("action", [-1, 6, 1.0, True, "1", None, [1], np.float32(1), np.int64(6)])
def test_invalid_actions_name_the_valid_range(pong: AtariEnvironment, action: Any) -> None:
    pong.reset(seed=0)
    with pytest.raises(InvalidAction, match=r"integer in \[0, 5\]"):
        pong.step(action)
    assert pong.state()["step_count"] == 0  # a refused action does not advance the episode


def test_numpy_integer_actions_are_accepted(pong: AtariEnvironment) -> None:
    pong.reset(seed=0)
    assert pong.step(np.int64(2)).info["episode_frame_number"] == 4
    assert pong.step(np.uint8(3)).info["episode_frame_number"] == 8


def test_step_without_obs_and_results_are_not_shared(pong: AtariEnvironment) -> None:
    first = pong.reset(seed=11).obs
    assert first is not None
    kept = first.copy()
    quiet = pong.step(0, obs=False)
    assert quiet.obs is None
    assert quiet.info["episode_frame_number"] == 4
    frames = [pong.step(2).obs for _ in range(40)]
    np.testing.assert_array_equal(first, kept)
    assert not np.array_equal(frames[0], frames[-1])  # the screen moved; arrays are distinct
    assert all(f is not None and f.flags.writeable for f in frames)


def test_results_are_plain_wire_values(pong: AtariEnvironment) -> None:
    results = [pong.reset(seed=2), pong.step(1)]
    for r in results:
        assert type(r.reward) is float
        assert type(r.terminated) is bool and type(r.truncated) is bool
        back = through_the_wire(r)
        assert back.info == r.info
    assert results[0].info["seeds"] == [int(s) for s in results[0].info["seeds"]]
    assert set(results[1].info) == {"lives", "episode_frame_number", "frame_number"}


def test_max_episode_steps_truncates() -> None:
    env = AtariEnvironment({"game": "pong", "max_episode_steps": 5, "obs_type": "ram"})
    try:
        env.reset(seed=0)
        flags = [env.step(0).truncated for _ in range(5)]
        assert flags == [False] * 4 + [True]
        assert env.state()["max_episode_steps"] == 5
        env.reset()
        assert not env.step(0).truncated and env.state()["step_count"] == 1
    finally:
        env.close()


def test_seeded_resets_are_reproducible_across_instances() -> None:
    def run(env: AtariEnvironment) -> list[Any]:
        out: list[Any] = [env.reset(seed=21).obs]
        rng = np.random.default_rng(0)
        for _ in range(150):
            r = env.step(int(rng.integers(6)))
            out.append((r.obs.tobytes() if r.obs is not None else None, r.reward))
        return out

    a, b = AtariEnvironment({"game": "pong"}), AtariEnvironment({"game": "pong"})
    try:
        first = run(a)
        run(a)  # a second seeded run on the same instance matches too
        assert run(a)[1:] == first[1:]
        assert run(b)[1:] == first[1:]
    finally:
        a.close()
        b.close()


def test_reset_refuses_bad_seed_and_options(pong: AtariEnvironment) -> None:
    for seed in (-1, 1.5, "3", True):
        with pytest.raises(ProtocolError, match="non-negative integer") as info:
            pong.reset(seed=seed)  # type: ignore[arg-type]
        assert info.value.code == "bad_request"
    with pytest.raises(EnvConfigError, match="'noop_max'"):
        pong.reset(options={"noop_max": 30})
    assert pong.reset(options={}).obs is not None


def test_lifecycle_errors() -> None:
    env = atari_factory({"game": "breakout", "obs_type": "ram"})
    assert isinstance(env, AtariEnvironment) and isinstance(env, Environment)
    with pytest.raises(InvalidState) as info:
        env.step(0)
    assert info.value.code == "not_reset"
    with pytest.raises(InvalidState):
        env.snapshot()
    env.reset()
    env.close()
    env.close()  # idempotent
    for call in (lambda: env.step(0), env.reset, env.state, env.snapshot):
        with pytest.raises(InvalidState) as info:
            call()
        assert info.value.code == "closed"


# ---------------------------------------------------------------------- state


def test_state_contents() -> None:
    env = AtariEnvironment(
        {
            "game": "Breakout",
            "obs_type": "grayscale",
            "repeat_action_probability": 0.0,
            "frameskip": 2,
            "max_episode_steps": 1000,
        }
    )
    try:
        assert env.state()["episode_id"] is None and env.state()["step_count"] == 0
        env.reset(seed=1, episode_id="ep-1")
        for _ in range(7):
            env.step(1)
        assert env.state() == {
            "episode_id": "ep-1",
            "step_count": 7,
            "game_name": "breakout",
            "obs_type": "grayscale",
            "full_action_space": False,
            "mode": 0,
            "difficulty": 0,
            "repeat_action_probability": 0.0,
            "frameskip": 2,
            "max_episode_steps": 1000,
            "lives": 5,
        }
        env.reset()
        fresh = env.state()["episode_id"]
        assert isinstance(fresh, str) and len(fresh) == 32 and fresh != "ep-1"
        frame = decode_server_frame(encode(StateReply(3, state=env.state())))
        assert isinstance(frame, StateReply) and frame.state == env.state()
    finally:
        env.close()


# ---------------------------------------------------------------------- snapshots


def _trace(env: AtariEnvironment, actions: list[int]) -> list[tuple[bytes, float, bool, bool, int]]:
    out = []
    for a in actions:
        r = env.step(a)
        assert r.obs is not None
        out.append((r.obs.tobytes(), r.reward, r.terminated, r.truncated, r.info["frame_number"]))
    return out


@pytest.mark.parametrize(("frameskip", "obs_type"), [(4, "rgb"), ([2, 6], "grayscale"), (1, "ram")])
def test_snapshot_restore_replays_identically(frameskip: int | list[int], obs_type: str) -> None:
    config = {
        "game": "breakout",
        "frameskip": frameskip,
        "repeat_action_probability": 0.9,
        "obs_type": obs_type,
    }
    env = AtariEnvironment(config)
    other = AtariEnvironment(config)
    try:
        env.reset(seed=8, episode_id="snap")
        rng = np.random.default_rng(1)
        _trace(env, [int(rng.integers(4)) for _ in range(60)])
        here = env.step(3).obs
        snap = env.snapshot()
        # The snapshot's repeat candidate is LEFT; each replay starts with NOOP
        # after a RIGHT, so a wrong candidate would move the paddle the wrong way.
        actions = [0] + [int(rng.integers(4)) for _ in range(118)] + [2]
        expected = _trace(env, actions)

        for target in (env, other, env):
            if target is other:
                other.reset(seed=999)
                other.step(2)
            restored = target.restore(snap)
            np.testing.assert_array_equal(restored.obs, here)
            assert restored.reward == 0.0 and not restored.done
            assert target.state()["step_count"] == 61
            assert target.state()["episode_id"] == "snap"
            assert _trace(target, actions) == expected

        # A snapshot taken after a restore neither changes the episode nor replays differently.
        other.restore(snap)
        _trace(other, actions[:50])
        later = other.snapshot()
        assert _trace(other, actions[50:]) == expected[50:]
        env.restore(later)
        assert _trace(env, actions[50:]) == expected[50:]
    finally:
        env.close()
        other.close()


def test_snapshot_of_a_restored_episode_and_of_a_finished_one() -> None:
    env = AtariEnvironment({"game": "pong", "max_episode_steps": 3})
    try:
        env.reset(seed=2)
        first = env.snapshot()
        start = env.restore(first).obs
        again = env.snapshot()  # taken before any step: the restored screen is kept
        for _ in range(3):
            last = env.step(1)
        assert last.truncated
        ended = env.snapshot()
        np.testing.assert_array_equal(env.restore(again).obs, start)
        back = env.restore(ended)
        assert back.truncated and back.done
        np.testing.assert_array_equal(back.obs, last.obs)
    finally:
        env.close()


def test_snapshot_keeps_step_limit_counting() -> None:
    env = AtariEnvironment({"game": "pong", "max_episode_steps": 10, "obs_type": "ram"})
    try:
        env.reset(seed=0)
        for _ in range(9):
            env.step(0)
        snap = env.snapshot()
        assert env.step(0).truncated
        assert not env.restore(snap).truncated
        assert env.step(0).truncated
    finally:
        env.close()


def test_bad_snapshots_are_refused(pong: AtariEnvironment) -> None:
    pong.reset(seed=0)
    good = pong.snapshot()
    tampered = bytearray(good)
    tampered[len(tampered) // 2] ^= 0xFF
    for bad in (b"", b"garbage" * 10, bytes(tampered), good[:-1], good + b"x", "text"):
        with pytest.raises(BadSnapshot, match="snapshot"):
            pong.restore(bad)  # type: ignore[arg-type]
    breakout = AtariEnvironment({"game": "breakout"})
    try:
        breakout.reset(seed=0)
        with pytest.raises(BadSnapshot, match=r"'breakout'.*'pong'"):
            pong.restore(breakout.snapshot())
    finally:
        breakout.close()
    assert pong.restore(good).obs is not None  # still usable after refusals
    gray = AtariEnvironment({"game": "pong", "obs_type": "grayscale"})
    try:
        with pytest.raises(BadSnapshot, match="same obs_type"):
            gray.restore(good)
    finally:
        gray.close()
