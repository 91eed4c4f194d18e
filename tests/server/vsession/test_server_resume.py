"""A vector session survives a dropped connection like a single one: resumed with its
token, its envs go on where they were; a repeated request gets its kept reply."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest

from openenv_ws.protocol import Batch, Open, Reset, Step, encode
from openenv_ws.server import ServerLimits, ServerThread, create_app
from openenv_ws.testing import fake_factory

from ._wire import wire

CONFIG = {"episode_length": 50, "obs_shape": [8, 8]}


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread(create_app(fake_factory, limits=ServerLimits(max_sessions=8))) as running:
        yield running


def test_resume_and_replay(server: ServerThread) -> None:
    with wire(server.url) as ref:  # the same steps without a drop
        ref.ok(Open(id=1, config=CONFIG, num_envs=3))
        ref.ok(Reset(id=2, seed=1))
        want = [ref.ok(Step(id=rid, action=[rid % 4, 1, 2])) for rid in range(3, 9)]
    with wire(server.url) as ws:
        opened = ws.ok(Open(id=1, config=CONFIG, num_envs=3))
        token = opened.resume_token
        assert token is not None
        ws.ok(Reset(id=2, seed=1))
        got = [ws.ok(Step(id=rid, action=[rid % 4, 1, 2])) for rid in range(3, 6)]
        ws.ws.send(encode(Step(id=6, action=[6 % 4, 1, 2])))
        ws.ws.socket.shutdown(socket.SHUT_RDWR)  # dropped before the reply came
    with wire(server.url) as again:
        resumed = again.ok(Open(id=1, resume=token))
        assert resumed.spec["num_envs"] == 3 and resumed.session_id == opened.session_id
        # The request whose reply was lost, sent again, is answered from the kept reply.
        got.append(again.ok(Step(id=6, action=[6 % 4, 1, 2])))
        got += [again.ok(Step(id=rid, action=[rid % 4, 1, 2])) for rid in (7, 8)]
    for a, b in zip(got, want, strict=True):
        assert isinstance(a, Batch)
        assert np.array_equal(a.obs, b.obs) and np.array_equal(a.reward, b.reward)
        assert a.info["step"].tolist() == b.info["step"].tolist()
