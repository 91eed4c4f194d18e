"""ServerSession's two entry points and its replay cache, socket-free.

``handle`` (bytes, the WebSocket path) and ``serve`` (frame objects, the HTTP
fallback and OpenEnv's dialect) are one logic: the same requests give the same
replies, byte for byte once encoded. A request sent again is answered from the
session's replay cache, not applied twice.
"""

from __future__ import annotations

import numpy as np
import pytest

from openenv_ws.protocol import (
    ClientFrame,
    Close,
    Closed,
    Error,
    GetState,
    Open,
    Reset,
    Result,
    Snapshot,
    Step,
    encode,
)
from openenv_ws.server import ServerSession
from openenv_ws.server.routes.fallback import JSON, MSGPACK, reply_response
from openenv_ws.server.session.replay import ReplayCache
from openenv_ws.testing import fake_factory

SCRIPT: list[ClientFrame] = [
    Open(id=1, config={"episode_length": 3}),
    Step(id=2, action=0),  # not reset yet: an error that keeps the session
    Reset(id=3, seed=7),
    Step(id=4, action=1),
    Step(id=5, action=np.array([1]), obs=False),  # not a plain step: decoded, and refused
    Step(id=6, action=2, obs=False),
    GetState(id=7),
    Snapshot(id=8),
    Step(id=9, action=3),
    Step(id=10, action=3),  # past the end of the episode
    Close(id=11),
]


def _session() -> ServerSession:
    return ServerSession(fake_factory, max_frame_size=1 << 20)


def _replies_by_bytes() -> list[bytes]:
    session = _session()
    return [session.handle(encode(frame))[0] for frame in SCRIPT]


def test_frames_and_bytes_give_the_same_replies() -> None:
    session = _session()
    by_frame = [session.serve(frame) for frame in SCRIPT]
    by_bytes = _replies_by_bytes()
    for (reply, close), data, frame in zip(by_frame, by_bytes, SCRIPT, strict=True):
        assert reply.id == frame.id
        if isinstance(reply, Result | Error | Closed):
            assert encode(reply) == data, frame
        else:  # opened, state and snapshot name the session or episode: ids differ
            assert data.startswith(encode(reply)[:8]), frame
        assert (close is None) == (frame.OP != "close")
    codes = [r.code for r, _ in by_frame if isinstance(r, Error)]
    assert codes == ["not_reset", "invalid_action", "episode_over"]


def test_a_value_the_wire_cannot_carry_is_an_error_reply_on_both_paths() -> None:
    class Odd:
        pass

    def factory(config: dict[str, object]) -> object:
        env = fake_factory(config)
        env.state = lambda: {"odd": Odd()}  # type: ignore[method-assign]
        return env

    for by_bytes in (True, False):
        session = ServerSession(factory, max_frame_size=1 << 20)  # type: ignore[arg-type]
        session.serve(Open(id=1))
        if by_bytes:
            reply, _ = session.handle(encode(GetState(id=2)))
            assert reply.startswith(encode(Error(id=2))[:10])
        else:  # the frame is encoded by the HTTP layer, which answers an error instead
            frame, _ = session.serve(GetState(id=2))
            for media in (MSGPACK, JSON):
                response = reply_response(frame, media)
                assert response.status_code >= 400 and b"Odd" in response.body


@pytest.mark.parametrize("by_bytes", [True, False])
def test_a_request_sent_again_is_answered_from_the_cache_not_applied_twice(
    by_bytes: bool,
) -> None:
    session = _session()
    session.replay = ReplayCache(sticky=True)
    steps = []

    def send(frame: ClientFrame) -> object:
        if by_bytes:
            return session.handle(encode(frame))[0]
        return session.serve(frame)[0]

    send(Open(id=1))
    send(Reset(id=2, seed=0))
    first = send(Step(id=3, action=1))
    steps.append(session.steps)
    again = send(Step(id=3, action=1))
    steps.append(session.steps)
    assert again is first and steps == [1, 1]
    send(Step(id=4, action=1))  # a new id: applied
    assert session.steps == 2
    send(Step(id=4, action=2))  # same id, other action: a new request, applied
    assert session.steps == 3


def test_requests_without_an_id_are_never_retries() -> None:
    session = _session()
    session.replay = ReplayCache(sticky=True)
    session.serve(Open(id=1))
    session.serve(Reset(id=2))
    session.serve(Step(id=0, action=1))
    session.serve(Step(id=0, action=1))
    assert session.steps == 2


def test_a_cache_that_is_not_sticky_compares_once_after_it_is_armed() -> None:
    hits = []
    cache = ReplayCache(on_hit=lambda: hits.append(1))
    cache.keep(b"a", "reply")
    assert not cache.armed  # the session does not ask
    cache.arm()
    assert cache.recall(b"a") == "reply" and hits == [1]
    assert not cache.armed  # one request was compared
    cache.arm()
    assert cache.recall(b"b") is None and not cache.armed


def test_bytes_never_match_a_frame() -> None:
    cache = ReplayCache(sticky=True)
    cache.keep(encode(Step(id=3, action=1)), "reply")
    assert cache.recall(Step(id=3, action=1)) is None
