"""Configs that scale work or memory (issue 18, finding 1): every one is bounded.

An ``open`` whose config asks for unbounded work (``frameskip`` of 2**62:
that many emulator frames a step, run on the event loop) or memory (a fake
observation of 2**48 bytes, 2**62 action names) must be refused with a
non-fatal ``bad_config`` naming the key, the value (short) and the allowed
range; the same connection then opens a sane session. A neighbour steps
throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from openenv_ws.protocol import Error, GetState, Open

from ..._rawwire import open_session, request, step
from .conftest import HostileServer, Neighbour, assert_contained, hostile_server

ATARI = [
    ({"frameskip": 2**62}, "frameskip", "1..64"),
    ({"frameskip": [1, 2**63]}, "frameskip", "high <= 65"),
    ({"frameskip": 65}, "frameskip", "1..64"),
    ({"max_num_frames_per_episode": 2**40}, "max_num_frames_per_episode", "1..2147483647"),
    ({"max_episode_steps": 2**62}, "max_episode_steps", "1..2147483647"),
    ({"game": "pong" * 100}, "game", "at most 64 characters"),
]

FAKE = [
    ({"n_actions": 2**62}, "n_actions", "1..1024"),
    ({"obs_shape": [4096, 4096, 4096, 4096]}, "obs_shape", "4194304 elements"),
    ({"episode_length": 2**62}, "episode_length", "1..2147483647"),
    ({"fail_at_step": "soon"}, "fail_at_step", "1..2147483647"),
    ({"step_sleep": 1e300}, "step_sleep", "0..3600"),
    ({"step_sleep": -1}, "step_sleep", "0..3600"),
]


@pytest.fixture(scope="module")
def atari() -> Iterator[HostileServer]:
    with hostile_server("--env", "atari") as server:
        yield server


@pytest.fixture(scope="module")
def fake() -> Iterator[HostileServer]:
    with hostile_server("--env", "fake") as server:
        yield server


def _refused_then_served(
    server: HostileServer, config: dict[str, Any], key: str, allowed: str, good: dict[str, Any]
) -> None:
    rss = server.rss()
    with Neighbour(server, good) as neighbour, server.raw() as ws:
        refused = request(ws, Open(id=1, config=config))
        assert isinstance(refused, Error), f"config {config} was accepted: {refused}"
        assert refused.code == "bad_config" and not refused.fatal, refused
        assert repr(key) in refused.message and allowed in refused.message, refused.message
        assert len(refused.message) < 400, refused.message
        # Non-fatal: the same connection opens a sane session and steps it.
        open_session(ws, good)
        result = request(ws, step(3))
        assert not isinstance(result, Error), result
        state = request(ws, GetState(id=4))
        assert not isinstance(state, Error), state
        assert_contained(server, neighbour, rss_before=rss)


@pytest.mark.parametrize(("config", "key", "allowed"), ATARI, ids=[c[1] for c in ATARI])
def test_atari_configs_that_scale_work_are_bad_config(
    atari: HostileServer, config: dict[str, Any], key: str, allowed: str
) -> None:
    _refused_then_served(atari, config, key, allowed, {"game": "pong"})


@pytest.mark.parametrize(("config", "key", "allowed"), FAKE, ids=[str(c[0]) for c in FAKE])
def test_fake_configs_that_scale_work_or_memory_are_bad_config(
    fake: HostileServer, config: dict[str, Any], key: str, allowed: str
) -> None:
    _refused_then_served(fake, config, key, allowed, {})
