"""The preprocessing options of an Atari config: defaults, bounds and refused combinations."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from atari.config import DEFAULT_CONFIG, PREPROCESSING_KEYS, normalize_config
from openenv_ws.errors import EnvConfigError


def test_defaults_mean_no_preprocessing() -> None:
    config = normalize_config({})
    assert {k: config[k] for k in PREPROCESSING_KEYS} == {
        "img_height": None,
        "img_width": None,
        "stack_num": 1,
        "maxpool": False,
        "noop_max": 0,
        "episodic_life": False,
        "reward_clipping": False,
        "use_fire_reset": False,
    }
    assert set(PREPROCESSING_KEYS) <= set(DEFAULT_CONFIG)


def test_the_standard_recipe_is_accepted_as_given() -> None:
    recipe = {
        "obs_type": "grayscale",
        "img_height": 84,
        "img_width": 84,
        "stack_num": 4,
        "maxpool": True,
        "noop_max": 30,
        "episodic_life": True,
        "reward_clipping": True,
        "use_fire_reset": True,
    }
    config = normalize_config(recipe)
    assert {k: config[k] for k in recipe} == recipe
    assert normalize_config({"frameskip": [2, 5], "maxpool": True})["maxpool"] is True
    assert normalize_config({"obs_type": "ram", "stack_num": 4, "noop_max": 5})["stack_num"] == 4
    # The largest observation allowed: 1024 x 1024 grayscale, 16 stacked.
    big = {"obs_type": "grayscale", "img_height": 1024, "img_width": 1024, "stack_num": 16}
    assert normalize_config(big)["stack_num"] == 16


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"img_height": 0}, ["'img_height'", "0", "1..1024", "null"]),
        ({"img_width": 1025}, ["'img_width'", "1025", "1..1024"]),
        ({"img_width": 84.0}, ["'img_width'", "84.0"]),
        ({"stack_num": 0}, ["'stack_num'", "0", "1..16"]),
        ({"stack_num": None}, ["'stack_num'", "None", "1..16"]),
        ({"stack_num": 17}, ["'stack_num'", "17"]),
        ({"noop_max": -1}, ["'noop_max'", "-1", "0..1000"]),
        ({"noop_max": 1001}, ["'noop_max'", "1001"]),
        ({"maxpool": 1}, ["'maxpool'", "1", "true or false"]),
        ({"episodic_life": "yes"}, ["'episodic_life'", "'yes'", "true or false"]),
        ({"reward_clipping": None}, ["'reward_clipping'", "None"]),
        ({"use_fire_reset": 0}, ["'use_fire_reset'", "0"]),
        ({"maxpool": True, "frameskip": 1}, ["'maxpool'", "frameskip", ">= 2", "1"]),
        ({"maxpool": True, "frameskip": [1, 4]}, ["'maxpool'", "low >= 2", "[1, 4]"]),
        ({"obs_type": "ram", "img_height": 84}, ["'img_height'", "'ram'", "'grayscale'"]),
        ({"obs_type": "ram", "img_width": 84}, ["'img_width'", "'ram'"]),
        ({"obs_type": "ram", "maxpool": True}, ["'maxpool'", "'ram'"]),
        (
            {"img_height": 1024, "img_width": 1024, "stack_num": 6},
            ["1024 x 1024 x 6", "3 channel(s)", "18,874,368", "16,777,216"],
        ),
    ],
)
def test_bad_preprocessing_options_are_named(config: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(EnvConfigError) as info:
        normalize_config(config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("key", ["autoreset_mode", "num_threads"])
def test_vector_only_options_point_to_vector_sessions(key: str) -> None:
    with pytest.raises(EnvConfigError) as info:
        normalize_config({key: 1})
    message = str(info.value)
    assert f"unknown Atari option(s) {key!r}" in message
    assert "vector sessions" in message and "num_envs" in message
    assert "known options:" in message and "stack_num" in message


def test_an_unknown_option_has_no_vector_hint() -> None:
    with pytest.raises(EnvConfigError) as info:
        normalize_config({"stack": 4})
    assert "vector" not in str(info.value) and "'stack'" in str(info.value)


def test_resizing_without_opencv_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from atari import AtariEnvironment

    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    with pytest.raises(EnvConfigError) as info:
        AtariEnvironment({"img_height": 84})
    assert "'img_height'" in str(info.value) and "opencv-python-headless" in str(info.value)
    # Without resizing OpenCV is not needed.
    assert AtariEnvironment({"img_height": 210, "stack_num": 2}).spec.observation.shape[1] == 210
