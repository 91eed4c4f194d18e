"""OpenEnv's JSON shapes, socket-free."""

from __future__ import annotations

import json

import numpy as np
import pytest

from openenv_ws.errors import ProtocolError
from openenv_ws.openenv_dialect import (
    action_from_openenv,
    dumps,
    legal_actions,
    openenv_error_code,
    reset_fields,
    result_payload,
)
from openenv_ws.protocol import ERRORS, Result


def test_dumps_writes_arrays_as_the_lists_json_would() -> None:
    screen = (np.arange(1000) * 7 % 256).astype(np.uint8).reshape(10, 100)
    payload = {
        "observation": {"screen": screen.ravel(), "gray": np.array([0.5, -1.0], np.float32)},
        "reward": 1.5,
        "done": False,
    }
    back = json.loads(dumps(payload))
    assert back["observation"]["screen"] == screen.ravel().tolist()
    assert back["observation"]["gray"] == [0.5, -1.0]
    assert back["reward"] == 1.5 and back["done"] is False
    assert json.loads(dumps({"empty": np.zeros(0, np.uint8)})) == {"empty": []}


def test_no_string_value_can_pass_for_an_array() -> None:
    forged = "\x00ndarray:0"
    back = json.loads(dumps({"a": forged, "b": np.ones(2, np.uint8), "c": [forged]}))
    assert back == {"a": forged, "b": [1, 1], "c": [forged]}


def test_result_payload_is_openenvs_atari_observation() -> None:
    obs = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    frame = Result(
        id=1,
        obs=obs,
        reward=2.0,
        terminated=False,
        truncated=True,
        done=True,
        info={"lives": 3, "frame_number": 8, "episode_frame_number": 4},
    )
    payload = result_payload(frame, [0, 1])
    assert payload == {
        "observation": {
            "screen": [0, 1, 2, 3, 4, 5],
            "screen_shape": [1, 2, 3],
            "legal_actions": [0, 1],
            "lives": 3,
            "frame_number": 8,
            "episode_frame_number": 4,
            "terminated": False,
            "truncated": True,
        },
        "reward": 2.0,
        "done": True,
    }
    assert json.loads(dumps(result_payload(frame, [0, 1], lists=False))) == payload


def test_actions_reset_parameters_and_legal_actions() -> None:
    assert action_from_openenv({"action_id": 3, "game_name": "pong", "obs_type": "rgb"}) == 3
    assert action_from_openenv({"action": [0.5, 1.0]}) == [0.5, 1.0]
    for bad, needle in [
        ({"action_id": "3"}, "must be an integer"),
        ({"move": 1}, "unknown action field"),
        ({}, "neither"),
        ([3], "JSON object"),
    ]:
        with pytest.raises(ProtocolError, match=needle) as info:
            action_from_openenv(bad)
        assert info.value.code == "bad_request"
    assert reset_fields({"seed": 1, "episode_id": "e", "level": 2}) == {
        "seed": 1,
        "episode_id": "e",
        "options": {"level": 2},
    }
    assert reset_fields(None) == {}
    assert legal_actions({"legal_actions": [0, 2]}) == [0, 2]
    assert legal_actions({"action": {"type": "discrete", "n": 3}}) == [0, 1, 2]
    assert legal_actions({"action": {"type": "array", "shape": [2]}}) == []


def test_every_protocol_code_has_an_openenv_code() -> None:
    openenv = {"INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR"}
    openenv |= {"CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"}
    assert {openenv_error_code(code) for code in ERRORS} <= openenv
    assert openenv_error_code("capacity") == "CAPACITY_REACHED"
