"""Atari sessions over a real uvicorn server: real ALE frames, errors, isolation, gym parity."""

from __future__ import annotations

import threading
from typing import Any

import ale_py
import gymnasium
import numpy as np
import pytest

from atari import AsyncAtariEnv, AtariAction, AtariEnv, AtariEnvironment, AtariState
from openenv_ws import RemoteEnvError
from openenv_ws.server import ServerThread

from ..conftest import UNIT

gymnasium.register_envs(ale_py)


@pytest.mark.parametrize(
    ("obs_type", "shape"), [("rgb", (210, 160, 3)), ("grayscale", (210, 160)), ("ram", (128,))]
)
def test_session_lifecycle_with_real_frames(
    atari_server: ServerThread, obs_type: str, shape: tuple[int, ...]
) -> None:
    local = AtariEnvironment({"game": "breakout", "obs_type": obs_type})
    with AtariEnv(atari_server.url, game="breakout", obs_type=obs_type) as env:
        assert env.spec.observation.shape == shape
        assert env.spec.action.meanings == ("NOOP", "FIRE", "RIGHT", "LEFT")
        first = env.reset(seed=3, episode_id="ep-1")
        np.testing.assert_array_equal(first.observation.screen, local.reset(seed=3).obs)
        assert first.observation.screen_shape == shape
        assert first.observation.legal_actions == [0, 1, 2, 3]
        frames = {first.observation.frame_number}
        for t in range(40):
            result = env.step(AtariAction(t % 4))
            want = local.step(t % 4)
            np.testing.assert_array_equal(result.observation.screen, want.obs)
            assert result.reward == want.reward and result.done == want.done
            frames.add(result.observation.frame_number)
        assert len(frames) == 41  # the emulator really advanced every step
        state = env.state()
        assert isinstance(state, AtariState)
        assert (state.episode_id, state.step_count, state.game_name) == ("ep-1", 40, "breakout")
        assert state.obs_type == obs_type and state.frameskip == 4
    local.close()


def test_errors_are_documented_codes_and_the_session_survives(atari_server: ServerThread) -> None:
    with AtariEnv(atari_server.url, game="pong") as env:
        with pytest.raises(RemoteEnvError) as info:
            env.step(0)
        assert info.value.code == "not_reset" and not info.value.fatal
        env.reset(seed=0)
        with pytest.raises(RemoteEnvError) as info:
            env.step(6)  # pong's minimal set has 6 actions: 0..5
        assert info.value.code == "invalid_action" and "6" in info.value.message
        with pytest.raises(RemoteEnvError) as info:
            env.step(True)
        assert info.value.code in ("invalid_action", "bad_request")
        assert env.step(1).observation.episode_frame_number == 4


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"game": "not_a_game"}, "not_a_game"),
        ({"game": "pong", "obs_type": "depth"}, "obs_type"),
        ({"game": "pong", "frameskip": 0}, "frameskip"),
        ({"game": "pong", "repeat_action_probability": 2.0}, "repeat_action_probability"),
        ({"game": "pong", "mode": 99}, "mode"),
    ],
)
def test_bad_config_is_refused_with_its_reason(
    atari_server: ServerThread, options: dict[str, Any], needle: str
) -> None:
    with pytest.raises(RemoteEnvError) as info:
        AtariEnv(atari_server.url, **options)
    assert info.value.code == "bad_config" and not info.value.fatal
    assert needle in info.value.message


def test_concurrent_sessions_with_different_games_do_not_interfere(
    atari_server: ServerThread,
) -> None:
    plans = [("pong", 1), ("breakout", 2), ("pong", 3), ("space_invaders", 4)]
    got: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(plans))

    def play(game: str, seed: int) -> None:
        try:
            with AtariEnv(atari_server.url, game=game, obs_type="grayscale") as env:
                barrier.wait(10 * UNIT)
                frames = [env.reset(seed=seed).observation.screen]
                n = env.spec.action.n
                frames += [env.step((seed * 7 + i) % n).observation.screen for i in range(60)]
                got[seed] = frames
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=play, args=p) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * UNIT)
    assert not errors, errors
    for game, seed in plans:
        local = AtariEnvironment({"game": game, "obs_type": "grayscale"})
        want = [local.reset(seed=seed).obs]
        n = local.spec.action.n
        want += [local.step((seed * 7 + i) % n).obs for i in range(60)]
        local.close()
        for i, (a, b) in enumerate(zip(got[seed], want, strict=True)):
            np.testing.assert_array_equal(a, b, err_msg=f"{game} seed {seed} step {i}")


@pytest.mark.parametrize("game", ["pong", "breakout"])
def test_remote_rollout_equals_gymnasium_bit_for_bit(atari_server: ServerThread, game: str) -> None:
    """600 steps with sticky actions (0.25), random actions, a mid-episode reseed."""
    gym_env = gymnasium.make(f"ALE/{game.title()}-v5", repeat_action_probability=0.25)
    rng = np.random.default_rng(7)
    rewards = 0
    with AtariEnv(atari_server.url, game=game, repeat_action_probability=0.25) as env:
        obs, _ = gym_env.reset(seed=99)
        np.testing.assert_array_equal(env.reset(seed=99).observation.screen, obs)
        for t in range(600):
            if t == 300:
                obs, _ = gym_env.reset(seed=5)
                np.testing.assert_array_equal(env.reset(seed=5).observation.screen, obs)
            action = int(rng.integers(env.spec.action.n))
            obs, reward, terminated, truncated, info = gym_env.step(action)
            result = env.step(action)
            np.testing.assert_array_equal(result.observation.screen, obs, err_msg=f"step {t}")
            assert (result.reward, result.terminated, result.truncated) == (
                reward,
                terminated,
                truncated,
            ), f"step {t}"
            assert result.observation.lives == info["lives"]
            assert result.observation.frame_number == info["frame_number"]
            rewards += reward != 0
            if terminated or truncated:
                obs, _ = gym_env.reset()
                np.testing.assert_array_equal(env.reset().observation.screen, obs)
    gym_env.close()
    assert rewards > 0  # the comparison covered scoring steps, not only idle frames


async def test_async_atari_client(atari_server: ServerThread) -> None:
    local = AtariEnvironment({"game": "pong", "obs_type": "ram"})
    async with AsyncAtariEnv(atari_server.url, game="pong", obs_type="ram") as env:
        r = await env.reset(seed=1)
        np.testing.assert_array_equal(r.observation.screen, local.reset(seed=1).obs)
        for a in [1, 2, 3, 4, 5, 0]:
            r = await env.step(a)
            np.testing.assert_array_equal(r.observation.screen, local.step(a).obs)
        state = await env.state()
        assert isinstance(state, AtariState) and state.step_count == 6
    local.close()


def test_typed_clients_take_every_option_of_the_server(atari_server: ServerThread) -> None:
    """AtariEnv and AsyncAtariEnv name the server's Atari options, preprocessing included,
    and a preprocessed session plays as the in-process environment of the same config."""
    from atari.config import DEFAULT_CONFIG
    from atari.options import OPTION_NAMES

    assert tuple(DEFAULT_CONFIG) == OPTION_NAMES
    options = {
        "obs_type": "grayscale",
        "img_height": 84,
        "img_width": 84,
        "stack_num": 4,
        "maxpool": True,
        "noop_max": 5,
        "episodic_life": True,
        "reward_clipping": True,
        "use_fire_reset": True,
    }
    local = AtariEnvironment({"game": "breakout", **options})
    with AtariEnv(atari_server.url, game="breakout", **options) as env:
        r = env.reset(seed=3)
        assert r.observation.screen.shape == (4, 84, 84)
        np.testing.assert_array_equal(r.observation.screen, local.reset(seed=3).obs)
        for a in [1, 2, 3, 0, 1, 2]:
            r = env.step(a)
            want = local.step(a)
            np.testing.assert_array_equal(r.observation.screen, want.obs)
            assert r.reward == want.reward and r.terminated == want.terminated
    local.close()


async def test_async_typed_client_takes_preprocessing_options(atari_server: ServerThread) -> None:
    async with AsyncAtariEnv(
        atari_server.url, game="pong", obs_type="grayscale", img_height=42, img_width=32
    ) as env:
        r = await env.reset(seed=0)
        assert r.observation.screen.shape == (42, 32)
