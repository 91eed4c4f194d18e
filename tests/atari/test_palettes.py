"""The palettes of atari/palettes.py turn ALE's colour codes into ALE's own RGB frames."""

from __future__ import annotations

import logging
import math

import ale_py
import numpy as np
import pytest
from ale_py import roms

from atari import AtariEnvironment
from atari.config import games
from atari.palettes import NTSC_GAMES, PAL_GAMES, palette_of, system_palette
from openenv_ws.palette import expanded


def test_every_bundled_game_has_one_palette() -> None:
    assert not NTSC_GAMES & PAL_GAMES
    missing = set(games()) - NTSC_GAMES - PAL_GAMES
    assert not missing, f"no palette measured for {sorted(missing)}: extend atari/palettes.py"


@pytest.mark.parametrize("system", ["ntsc", "pal"])
def test_odd_codes_are_the_grey_of_the_colour_before(system: str) -> None:
    table = np.frombuffer(system_palette(system), np.uint8).reshape(256, 3).astype(int)
    assert len({tuple(c) for c in table[0::2]}) > 100  # real colours, mostly distinct
    for code in range(1, 256, 2):
        r, g, b = table[code - 1]
        grey = math.floor(r * 0.2989 + g * 0.5870 + b * 0.1140 + 0.5)
        assert tuple(table[code]) == (grey, grey, grey), code


@pytest.mark.parametrize("game", games())
def test_the_palette_expands_every_frame_as_ale_does(game: str) -> None:
    """Random play, one frame in 8 compared pixel for pixel with getScreenRGB."""
    palette = palette_of(game)
    assert palette is not None
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", 11)
    ale.loadROM(roms.get_rom_path(game))
    actions = ale.getLegalActionSet()
    pick = np.random.default_rng(len(game)).integers(0, len(actions), 800).tolist()
    height, width = ale.getScreenDims()
    codes = np.empty((height, width), np.uint8)
    rgb = np.empty((height, width, 3), np.uint8)
    colours: set[int] = set()
    for i, a in enumerate(pick):
        if ale.game_over():
            ale.reset_game()
        ale.act(actions[a])
        if i % 8 == 0:
            ale.getScreen(codes)
            ale.getScreenRGB(rgb)
            colours.update(np.unique(codes).tolist())
            np.testing.assert_array_equal(expanded(codes, palette), rgb, err_msg=f"frame {i}")
    assert len(colours) >= 2  # the game drew something


@pytest.mark.parametrize("game", ["pong", "pacman"])  # an NTSC and a PAL game
def test_an_indexed_environment_plays_like_a_full_colour_one(game: str) -> None:
    indexed, plain = AtariEnvironment({"game": game}), AtariEnvironment({"game": game})
    try:
        palette = indexed.indexed_frames()
        assert palette == palette_of(game)
        rgb_shape = plain.spec.observation.shape  # type: ignore[union-attr]
        assert indexed.spec.observation.shape == rgb_shape  # type: ignore[union-attr]
        a, b = indexed.reset(seed=5), plain.reset(seed=5)
        assert a.obs.shape == rgb_shape[:2] and a.obs.dtype == np.uint8
        np.testing.assert_array_equal(expanded(a.obs, palette), b.obs)
        out = np.empty(rgb_shape[:2], np.uint8)
        n = plain.spec.action.n  # type: ignore[union-attr]
        for t in range(300):
            x = indexed.step(t % n, out=out) if t % 2 else indexed.step(t % n)
            y = plain.step(t % n)
            assert (x.reward, x.terminated, x.truncated) == (y.reward, y.terminated, y.truncated)
            assert x.obs is out if t % 2 else x.obs is not out
            np.testing.assert_array_equal(expanded(x.obs, palette), y.obs)
            if y.terminated or y.truncated:
                indexed.reset()
                plain.reset()
    finally:
        indexed.close()
        plain.close()


@pytest.mark.parametrize("obs_type", ["grayscale", "ram"])
def test_only_rgb_observations_are_indexed(obs_type: str) -> None:
    env = AtariEnvironment({"game": "pong", "obs_type": obs_type})
    try:
        assert env.indexed_frames() is None
        assert env.reset(seed=0).obs.shape == env.spec.observation.shape  # type: ignore[union-attr]
    finally:
        env.close()


def test_a_closed_environment_is_not_indexed() -> None:
    env = AtariEnvironment({"game": "pong"})
    env.close()
    assert env.indexed_frames() is None


def test_recycling_returns_to_full_colour() -> None:
    env = AtariEnvironment({"game": "breakout"})
    try:
        env.indexed_frames()
        assert env.reset(seed=1).obs.shape == (210, 160)
        assert env.recycle()
        first = env.reset(seed=1)
        assert first.obs.shape == (210, 160, 3)
        assert env.step(1).obs.shape == (210, 160, 3)
    finally:
        env.close()


def test_snapshots_hold_the_rgb_screen_whichever_way_the_session_observes() -> None:
    indexed, plain = AtariEnvironment({"game": "pong"}), AtariEnvironment({"game": "pong"})
    try:
        palette = indexed.indexed_frames()
        assert palette is not None
        indexed.reset(seed=3)
        for _ in range(40):
            last = indexed.step(2)
        snap = indexed.snapshot()
        # Restored in a full-colour session: the RGB frame of the step snapshotted.
        plain.reset(seed=0)
        restored = plain.restore(snap)
        np.testing.assert_array_equal(restored.obs, expanded(last.obs, palette))
        # Restored in the indexed session itself: full colour too (nothing to index).
        again = indexed.restore(snap)
        assert again.obs.shape == (210, 160, 3)
        np.testing.assert_array_equal(again.obs, restored.obs)
        # And both go on alike, the indexed one in colour codes again.
        a, b = indexed.step(3), plain.step(3)
        assert a.obs.shape == (210, 160)
        np.testing.assert_array_equal(expanded(a.obs, palette), b.obs)
        # A snapshot of the indexed session restores in the full-colour one and back.
        snap2 = plain.snapshot()
        np.testing.assert_array_equal(indexed.restore(snap2).obs, b.obs)
    finally:
        indexed.close()
        plain.close()


def test_a_palette_that_disagrees_with_ale_falls_back_to_rgb(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = AtariEnvironment({"game": "pong"})
    try:
        assert env.indexed_frames() is not None
        env._palette = system_palette("pal")  # pong is NTSC: its colours differ
        with caplog.at_level(logging.WARNING, logger="atari"):
            first = env.reset(seed=0)
        assert first.obs.shape == (210, 160, 3)
        assert "differs from its palette expansion" in caplog.text
        assert env.step(0).obs.shape == (210, 160, 3)  # from then on
    finally:
        env.close()
