"""The typed Atari models, built from real environment output and real frames."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import atari
from atari import AtariAction, AtariEnvironment, AtariObservation, AtariState
from openenv_ws.protocol import StateReply, decode_server_frame, encode

from .wire import through_the_wire


def test_package_exports() -> None:
    from atari import client, config, environment, models, plugin

    exported = set(atari.__all__)
    assert set(models.__all__) <= exported
    assert {"AtariEnvironment", "atari_factory", "games", "normalize_config"} <= exported
    assert set(client.__all__) <= exported
    homes = (client, config, environment, models, plugin)
    assert exported <= set().union(*(module.__all__ for module in homes))
    for name in exported:
        assert getattr(atari, name) is getattr(
            next(module for module in homes if name in module.__all__), name
        )
    assert set(dir(atari)) >= exported
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        atari.nothing  # noqa: B018


def test_action_to_wire() -> None:
    assert AtariAction(3).to_wire() == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        AtariAction(1).action_id = 2  # type: ignore[misc]


def test_observation_and_state_from_wire_frames() -> None:
    env = AtariEnvironment({"game": "breakout", "max_episode_steps": 2})
    try:
        legal = env.spec.extra["legal_actions"]
        env.reset(seed=5, episode_id="e1")
        for _ in range(2):
            r = env.step(1)
        frame = through_the_wire(r, 4)
        obs = AtariObservation.from_result(frame, legal_actions=legal)
        assert obs.screen is not None and r.obs is not None
        np.testing.assert_array_equal(obs.screen, r.obs)
        assert obs.screen_shape == (210, 160, 3)
        assert obs.legal_actions == [0, 1, 2, 3]
        assert (obs.lives, obs.episode_frame_number) == (5, 8)
        assert obs.frame_number == r.info["frame_number"]
        assert (obs.truncated, obs.done, obs.terminated, obs.reward) == (True, True, False, 0.0)
        # An in-process EnvResult works the same way.
        direct = AtariObservation.from_result(r, legal_actions=legal)
        for f in dataclasses.fields(AtariObservation):
            if f.name != "screen":
                assert getattr(direct, f.name) == getattr(obs, f.name), f.name
        assert direct.screen is r.obs  # no copy in process

        quiet = AtariObservation.from_result(env.step(0, obs=False))
        assert quiet.screen is None and quiet.screen_shape == ()

        reply = decode_server_frame(encode(StateReply(5, state=env.state())))
        assert isinstance(reply, StateReply)
        state = AtariState.from_wire(reply.state)
        assert state == AtariState(
            episode_id="e1",
            step_count=3,
            game_name="breakout",
            obs_type="rgb",
            full_action_space=False,
            mode=0,
            difficulty=0,
            repeat_action_probability=0.25,
            frameskip=4,
            max_episode_steps=2,
            lives=5,
        )
    finally:
        env.close()


def test_state_from_wire_keeps_stochastic_frameskip_and_needs_its_keys() -> None:
    env = AtariEnvironment({"game": "pong", "frameskip": [2, 5], "obs_type": "ram"})
    try:
        assert AtariState.from_wire(env.state()).frameskip == (2, 5)
    finally:
        env.close()
    with pytest.raises(KeyError):
        AtariState.from_wire({"episode_id": "x"})
