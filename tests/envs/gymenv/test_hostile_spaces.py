"""Hostile actions on the raw wire against Gymnasium sessions with structured spaces.

A real ``openenv-ws serve --env gymnasium --gym-ids ...`` subprocess (the ids on the
command line, the environment variable set to another list that must lose) hosts a
session of ``AllSpaces-v0`` (a Dict action of Text, MultiBinary, MultiDiscrete and a
Tuple of a Discrete with a start and a Box) and one of ``Typing-v0`` (a Text action).
Each action below is outside its space in one place; each must be refused with a
non-fatal ``invalid_action`` naming that place, the session going on, while a
CartPole neighbour steps throughout.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openenv_ws.envs.gymnasium import IDS_ENV
from openenv_ws.protocol import Error, Open, Reset, Result, Step

from ..._rawwire import request
from ...server.hostile.conftest import (
    HostileServer,
    Neighbour,
    RawWS,
    assert_contained,
    hostile_server,
)
from . import textenvs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    ids = ",".join(("CartPole-v1", textenvs.ALL_SPACES, textenvs.TYPING))
    env = {IDS_ENV: "Acrobot-v1", "PYTHONPATH": str(ROOT)}
    with hostile_server("--env", "gymnasium", "--gym-ids", ids, env=env) as srv:
        yield srv


def good_action() -> dict[str, Any]:
    return {
        "word": "xyz",
        "keys": np.array([1, 0, 1, 0], np.int8),
        "dial": np.array([1, 4]),
        "pair": [0, np.array([0.5, -0.5], np.float32)],
    }


def with_(key: str, value: Any) -> dict[str, Any]:
    action = good_action()
    action[key] = value
    return action


BAD_ALL_SPACES: list[tuple[Any, str]] = [
    (5, "a map is needed, got int"),
    ("xyz", "a map is needed, got str"),
    ([1, 2], "a map is needed, got list"),
    ({k: v for k, v in good_action().items() if k != "keys"}, r"keys \[.*\] are not \["),
    ({**good_action(), "evil": 1}, r"keys .*'evil'.* are not"),
    (with_("word", "xq"), r"\['word'\]: it holds a character outside the space's charset"),
    (with_("word", "x" * 7), r"\['word'\]: 7 characters, not 1\.\.6"),
    (with_("word", ""), r"\['word'\]: 0 characters"),
    (with_("word", 3), r"\['word'\]: a string is needed, got int"),
    (with_("word", b"xy"), r"\['word'\]: a string is needed, got bytes"),
    (with_("keys", np.array([1, 2, 0, 0], np.int8)), r"\['keys'\]: an element is neither 0 nor 1"),
    (with_("keys", np.ones(5, np.int8)), r"\['keys'\]: shape \[5\] is not \[4\]"),
    (with_("keys", np.ones(4, np.float32)), r"\['keys'\]: an array of 0 and 1 is needed"),
    (with_("dial", np.array([0, 0])), r"\['dial'\]: an element is outside its range"),
    (with_("dial", np.array([1, 5])), r"\['dial'\]: an element is outside its range"),
    (with_("dial", np.array([1.0, 0.0])), r"\['dial'\]: an array of integers is needed"),
    (with_("dial", "12"), r"\['dial'\]: an array of integers is needed"),
    (with_("pair", [0]), r"\['pair'\]: 1 items, not 2"),
    (with_("pair", [0] * 100_000), r"\['pair'\]: 100000 items, not 2"),
    (with_("pair", {"a": 1}), r"\['pair'\]: a list is needed, got dict"),
    (with_("pair", [2, [0.0, 0.0]]), r"\['pair'\]: \[0\]: 2 is outside -1\.\.1"),
    (with_("pair", [-2, [0.0, 0.0]]), r"\['pair'\]: \[0\]: -2 is outside -1\.\.1"),
    (with_("pair", [True, [0.0, 0.0]]), r"\['pair'\]: \[0\]: an integer is needed, got bool"),
    (with_("pair", [0.5, [0.0, 0.0]]), r"\['pair'\]: \[0\]: an integer is needed, got float"),
    (with_("pair", [2**64 - 1, [0.0, 0.0]]), r"\['pair'\]: \[0\]: 18446744073709551615 is outside"),
    (with_("pair", [0, np.array([np.nan, 0], np.float32)]), r"\[1\]: it holds NaN or infinity"),
    (with_("pair", [0, [[[[[[1.0]]]]]]]), r"\[1\]: shape \[1, 1, 1, 1, 1, 1\] is not \[2\]"),
    (with_("pair", [0, [0.0, "a"]]), r"\[1\]: an array is needed, got list"),
    (with_("pair", [0, b"\x00" * 8]), r"\[1\]: an array is needed, got bytes"),
    (with_("pair", [0, np.zeros((0,), np.float32)]), r"\[1\]: shape \[0\] is not \[2\]"),
]

BAD_TYPING: list[tuple[Any, str]] = [
    ({"text": "abc"}, "a string is needed, got dict"),
    ("abcdef", r"6 characters, not 0\.\.5"),
    ("abz", "outside the space's charset"),
    ("ab\x00", "outside the space's charset"),
    (7, "a string is needed, got int"),
]


def _refused(ws: RawWS, rid: int, action: Any, message: str) -> None:
    reply = request(ws, Step(id=rid, action=action))
    assert isinstance(reply, Error), (action, reply)
    assert (reply.code, reply.fatal) == ("invalid_action", False), reply
    assert re.search(message, reply.message), (message, reply.message)


@pytest.mark.parametrize(
    ("env_id", "bad", "good"),
    [
        (textenvs.ALL_SPACES, BAD_ALL_SPACES, good_action()),
        (textenvs.TYPING, BAD_TYPING, "abc"),
    ],
    ids=["all-spaces", "text"],
)
def test_bad_structured_actions_are_refused_and_the_session_goes_on(
    server: HostileServer, env_id: str, bad: list[tuple[Any, str]], good: Any
) -> None:
    rss = server.rss()
    with (
        Neighbour(server, {"id": "CartPole-v1"}) as neighbour,
        server.raw() as ws,
    ):
        opened = request(ws, Open(id=1, config={"id": env_id}, structured=True))
        assert not isinstance(opened, Error), opened
        assert isinstance(request(ws, Reset(id=2, seed=0)), Result)
        for rid, (action, message) in enumerate(bad, start=3):
            _refused(ws, rid, action, message)
            neighbour.check()
        assert isinstance(request(ws, Step(id=999, action=good)), Result)
        assert_contained(server, neighbour, rss_before=rss)


def test_a_client_without_structured_values_is_refused_then_may_open(
    server: HostileServer,
) -> None:
    with server.raw() as ws:
        refused = request(ws, Open(id=1, config={"id": textenvs.ALL_SPACES}))
        assert isinstance(refused, Error) and refused.code == "bad_config", refused
        assert "structured" in refused.message and not refused.fatal
        opened = request(ws, Open(id=2, config={"id": textenvs.ALL_SPACES}, structured=True))
        assert not isinstance(opened, Error), opened
        assert opened.spec["action"]["spaces"]["pair"]["spaces"][0]["start"] == -1


def test_the_gym_ids_option_wins_over_the_environment_variable(server: HostileServer) -> None:
    with server.raw() as ws:
        refused = request(ws, Open(id=1, config={"id": "Acrobot-v1"}, structured=True))
        assert isinstance(refused, Error) and refused.code == "bad_config", refused
        assert "'Acrobot-v1' is not allowed" in refused.message
        assert "--gym-ids" in refused.message
