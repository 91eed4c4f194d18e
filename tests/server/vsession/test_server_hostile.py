"""Hostile requests to vector sessions on the raw wire, while a single session and a
vector session of the same server keep stepping: each gets a clear error naming the
problem, no session is lost, and the bystanders never notice."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import msgpack
import numpy as np
import pytest

from openenv_ws.protocol import (
    Batch,
    Error,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    Send,
    Snapshot,
    Step,
)
from openenv_ws.server import ServerLimits, ServerThread, create_app

from ._wire import Wire, wire

PONG = {"game": "pong"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    from atari import atari_factory

    limits = ServerLimits(max_sessions=64, max_envs=32)
    with ServerThread(create_app(atari_factory, limits=limits)) as running:
        yield running


class Bystanders:
    """A single session and a synchronous vector session, stepped after every attack."""

    def __init__(self, single: Wire, vector: Wire) -> None:
        self.single, self.vector = single, vector
        single.ok(Open(id=1, config=PONG))
        single.ok(Reset(id=2, seed=0))
        vector.ok(Open(id=1, config=PONG, num_envs=2))
        vector.ok(Reset(id=2, seed=0))
        self.rid = 3

    def step(self) -> None:
        self.rid += 1
        result = self.single.ok(Step(id=self.rid, action=self.rid % 6))
        assert isinstance(result, Result) and result.obs.shape == (210, 160, 3)
        batch = self.vector.ok(Step(id=self.rid, action=[1, 2]))
        assert isinstance(batch, Batch) and batch.obs.shape == (2, 210, 160, 3)


@pytest.fixture(scope="module")
def bystanders(server: ServerThread) -> Iterator[Bystanders]:
    with ExitStack() as stack:
        single = stack.enter_context(wire(server.url))
        vector = stack.enter_context(wire(server.url))
        yield Bystanders(single, vector)


def _refused(ws: Wire, frame: Any, code: str, words: Sequence[str] = ()) -> Error:
    got = ws.ask(frame)
    assert isinstance(got, Error), got
    assert got.code == code and not got.fatal, got
    assert got.id == frame.id
    for word in words:
        assert word in got.message, got.message
    return got


@pytest.mark.parametrize(
    "frame, code, words",
    [
        (Open(id=5, config=PONG, num_envs=0), "bad_request", ["num_envs", "1..65536"]),
        (Open(id=5, config=PONG, num_envs=-1), "bad_request", ["num_envs", "-1"]),
        (Open(id=5, config=PONG, num_envs=10**9), "bad_request", ["num_envs"]),
        (Open(id=5, config=PONG, num_envs=33), "bad_config", ["limit of 32", "--max-envs"]),
        (Open(id=5, config=PONG, num_envs=4.0), "bad_request", ["num_envs", "float"]),  # type: ignore[arg-type]
        (Open(id=5, config=PONG, num_envs="4"), "bad_request", ["num_envs", "str"]),  # type: ignore[arg-type]
        (Open(id=5, config=PONG, num_envs=2, batch_size=3), "bad_request", ["batch_size"]),
        (Open(id=5, config=PONG, batch_size=3), "bad_request", ["needs 'num_envs'"]),
        (
            Open(id=5, config={**PONG, "autoreset_mode": "same_step"}),
            "bad_config",
            ["autoreset_mode"],
        ),
        (Open(id=5, config={**PONG, "num_threads": 2}), "bad_config", ["num_threads"]),
        (Open(id=5, config={**PONG, "obs_type": "ram"}, num_envs=2), "bad_config", ["obs_type"]),
        (Open(id=5, config={**PONG, "frameskip": [2, 5]}, num_envs=2), "bad_config", ["frameskip"]),
        (Open(id=5, config={**PONG, "mode": 0}, num_envs=2), "bad_config", ["'mode'"]),
        (
            Open(id=5, config={**PONG, "max_episode_steps": 9}, num_envs=2),
            "bad_config",
            ["max_episode_steps"],
        ),
        (Open(id=5, config={**PONG, "num_threads": 65}, num_envs=2), "bad_config", ["num_threads"]),
        (
            Open(id=5, config={**PONG, "autoreset_mode": "often"}, num_envs=2),
            "bad_config",
            ["autoreset_mode"],
        ),
        (Open(id=5, config={"game": "pongg"}, num_envs=2), "bad_config", ["pong"]),
        (
            Open(
                id=5,
                config={**PONG, "img_height": 1024, "img_width": 1024, "stack_num": 5},
                num_envs=32,
            ),
            "bad_config",
            ["503316480 bytes", "lower num_envs"],
        ),
    ],
)
def test_bad_opens(
    server: ServerThread, bystanders: Bystanders, frame: Open, code: str, words: list[str]
) -> None:
    with wire(server.url) as ws:
        _refused(ws, frame, code, words)
        bystanders.step()
        # The connection is still there, and can open a session after all.
        assert isinstance(ws.ok(Open(id=6, config=PONG, num_envs=2)), Opened)
        assert isinstance(ws.ok(Reset(id=7)), Batch)
    bystanders.step()


def _async(ws: Wire) -> Batch:
    ws.ok(Open(id=1, config={**PONG, "num_threads": 2}, num_envs=4, batch_size=2))
    return ws.ok(Reset(id=2, seed=0))  # type: ignore[no-any-return]


def _raw_send(rid: int, **fields: Any) -> bytes:
    return msgpack.packb({"op": "send", "id": rid, **fields}, use_bin_type=True)


def test_hostile_requests_in_an_async_session(server: ServerThread, bystanders: Bystanders) -> None:
    with wire(server.url) as ws:
        batch = _async(ws)
        ids = batch.env_id.tolist()
        others = sorted(set(range(4)) - set(ids))
        attacks: list[tuple[Any, str, list[str]]] = [
            (Step(id=10, action=[0, 0, 0, 0]), "unsupported", ["asynchronous", "send"]),
            (Reset(id=11, options={"env_ids": [0]}), "unsupported", ["reset once"]),
            (Reset(id=11, seed=3), "unsupported", ["reset once", "autoreset"]),
            (Send(id=12, action=[0, 0], env_ids=others), "invalid_action", ["previous batch"]),
            (Send(id=13, action=[0, 0], env_ids=[ids[0], ids[0]]), "invalid_action", ["repeated"]),
            (Send(id=14, action=[0, 0], env_ids=[ids[0], 99]), "invalid_action", ["previous"]),
            (Send(id=15, action=[0, 0], env_ids=[-1, ids[0]]), "invalid_action", ["previous"]),
            (Send(id=16, action=[0, 0], env_ids=[*ids, 0]), "bad_request", ["env_ids", "3"]),
            (Send(id=17, action=[0]), "invalid_action", ["2 integers"]),
            (Send(id=18, action=[0, 0, 0]), "invalid_action", ["2 integers"]),
            (Send(id=19, action=np.zeros(2, np.float32)), "invalid_action", ["float32"]),
            (Send(id=20, action=[0, 6]), "invalid_action", ["outside the action space"]),
            (Send(id=21, action=[0, -1]), "invalid_action", ["outside the action space"]),
            (Send(id=22, action=[[0], [1]]), "bad_request", ["action"]),
            (Send(id=23, action=[0, 1.5]), "bad_request", ["action"]),  # type: ignore[list-item]
            (Send(id=24, action=np.zeros((2, 1), np.int64)), "invalid_action", ["shape [2, 1]"]),
            (Send(id=25, action=[0, 2**63 - 1]), "invalid_action", ["outside"]),
            (Snapshot(id=26), "unsupported", ["snapshot"]),
            (Restore(id=27, snapshot=b"x" * 64), "unsupported", ["restore"]),
            (Open(id=28, config=PONG, num_envs=2), "already_open", []),
        ]
        for frame, code, words in attacks:
            _refused(ws, frame, code, words)
            bystanders.step()
        for rid, data in (
            (30, _raw_send(30, action="01")),
            (31, _raw_send(31, action=[0, 0], env_ids={"a": 1})),
            (32, _raw_send(32, env_ids=[0, 1])),
        ):
            ws.ws.send(data)
            got = ws.read()
            assert isinstance(got, Error) and got.code == "bad_request" and got.id == rid, got
        # The batch the attacks left alone is still the one to answer.
        after = ws.ok(Send(id=40, action=[1, 1], env_ids=ids[::-1]))
        assert after.env_id.shape == (2,)
        ws.ok(Send(id=41, action=[2, 2]))
    bystanders.step()


def test_async_session_resets_every_env_once(server: ServerThread, bystanders: Bystanders) -> None:
    with wire(server.url) as ws:
        ws.ok(Open(id=1, config={**PONG, "num_threads": 2}, num_envs=4, batch_size=2))
        _refused(ws, Reset(id=2, options={"env_ids": [0]}), "unsupported", ["synchronous"])
        _refused(ws, Send(id=3, action=[0, 0]), "not_reset", ["reset"])
        first = ws.ok(Reset(id=4, seed=1))
        for rid in range(5, 12):  # steps under way in the engine when the resets come
            ws.ok(Send(id=rid, action=[0, 1]))
            _refused(ws, Reset(id=100 + rid, seed=rid), "unsupported", ["reset once"])
            bystanders.step()
        assert first.env_id.shape == (2,)
        assert ws.ok(Send(id=20, action=[1, 1])).env_id.shape == (2,)
    bystanders.step()


def test_hostile_requests_in_a_sync_session(server: ServerThread, bystanders: Bystanders) -> None:
    with wire(server.url) as ws:
        ws.ok(Open(id=1, config=PONG, num_envs=3))
        _refused(ws, Step(id=2, action=[0, 0, 0]), "not_reset", ["reset"])
        _refused(ws, Send(id=3, action=[0, 0, 0]), "not_reset", ["reset"])
        ws.ok(Reset(id=4, seed=1))
        for rid, action, code, words in [
            (5, 3, "invalid_action", ["3 integers"]),
            (6, [0, 1], "invalid_action", ["3 integers"]),
            (7, np.zeros(3, np.float64), "invalid_action", ["float64"]),
            (8, {"a": 1}, "invalid_action", ["3 integers"]),
            (9, [0, 1, 99], "invalid_action", ["99", "0..5"]),
            (10, [0, [1], 2], "invalid_action", ["3 integers"]),
            (11, np.zeros((3, 2), np.int32), "invalid_action", ["shape [3, 2]"]),
            (18, np.zeros((3, 1), np.float32), "invalid_action", ["float32", "shape [3, 1]"]),
        ]:
            _refused(ws, Step(id=rid, action=action), code, words)
            bystanders.step()
        for rid, seed in ((30, 2**31 - 2), (31, 2**64 - 1)):  # env 2 gets seed + 2
            _refused(ws, Reset(id=rid, seed=seed), "bad_request", ["at most 2147483645"])
        assert isinstance(ws.ok(Reset(id=32, seed=2**31 - 3)), Batch)
        for rid, ids, words in [
            (12, [3], ["env_ids", "0..2"]),
            (13, [0, 0], ["distinct"]),
            (14, "0", ["env_ids"]),
            (15, [0.5], ["env_ids"]),
        ]:
            _refused(ws, Reset(id=rid, options={"env_ids": ids}), "bad_config", words)
        _refused(ws, Send(id=16, action=[0, 0, 0], env_ids=[0, 1, 1]), "invalid_action")
        assert isinstance(ws.ok(Step(id=17, action=np.array([1, 2, 3], np.int8))), Batch)
    bystanders.step()


def test_send_to_a_single_session(server: ServerThread, bystanders: Bystanders) -> None:
    with wire(server.url) as ws:
        _refused(ws, Send(id=1, action=[0]), "not_open", ["vector sessions"])
        ws.ok(Open(id=2, config=PONG))
        ws.ok(Reset(id=3))
        _refused(ws, Send(id=4, action=[0]), "unsupported", ["vector sessions", "'step'"])
        assert isinstance(ws.ok(Step(id=5, action=0)), Result)
    bystanders.step()
