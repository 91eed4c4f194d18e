"""ServerSession, socket-free: request bytes in, reply bytes and close decisions out."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from openenv_ws.protocol import (
    Close,
    Closed,
    Error,
    GetState,
    Open,
    Opened,
    Reset,
    Restore,
    Result,
    SessionState,
    Snapshot,
    SnapshotData,
    StateReply,
    Step,
    decode_server_frame,
    encode,
    parse_step,
)
from openenv_ws.server import ServerSession
from openenv_ws.testing import FakeEnvironment, fake_factory


def serve(session: ServerSession, frame: object) -> tuple[object, object]:
    reply, close = session.handle(encode(frame))  # type: ignore[arg-type]
    return decode_server_frame(reply), close


def opened_session(**config: object) -> ServerSession:
    session = ServerSession(fake_factory, max_frame_size=1 << 20)
    reply, close = serve(session, Open(id=1, config=dict(config)))
    assert isinstance(reply, Opened) and close is None
    return session


def test_full_session_matches_in_process_environment() -> None:
    session = opened_session(episode_length=3)
    local = FakeEnvironment({"episode_length": 3})
    reply, _ = serve(session, Reset(id=2, seed=5))
    expected = local.reset(seed=5)
    assert isinstance(reply, Result) and reply.id == 2
    np.testing.assert_array_equal(reply.obs, expected.obs)
    for rid, action in enumerate([1, 3, 2], start=3):
        reply, _ = serve(session, Step(id=rid, action=action))
        want = local.step(action)
        assert isinstance(reply, Result) and reply.id == rid
        np.testing.assert_array_equal(reply.obs, want.obs)
        assert (reply.reward, reply.terminated, reply.done) == (
            want.reward,
            want.terminated,
            want.done,
        )
    assert session.state is SessionState.ENDED
    reply, _ = serve(session, GetState(id=9))
    assert isinstance(reply, StateReply) and reply.state["step_count"] == 3
    reply, close = serve(session, Close(id=10))
    assert isinstance(reply, Closed) and close is not None and close.code == 1000


def test_opened_carries_spec_and_session_id() -> None:
    session = ServerSession(fake_factory, max_frame_size=1 << 20)
    reply, _ = serve(session, Open(id=1, config={"obs_shape": [2, 3], "n_actions": 5}))
    assert isinstance(reply, Opened)
    assert reply.session_id == session.session_id and len(reply.session_id) == 32
    assert reply.spec["action"] == {
        "type": "discrete",
        "n": 5,
        "meanings": ["A0", "A1", "A2", "A3", "A4"],
    }
    assert reply.spec["observation"]["shape"] == [2, 3]


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([Step(id=1, action=0)], "not_open"),
        ([Open(id=1), Step(id=2, action=0)], "not_reset"),
        ([Open(id=1), Open(id=2)], "already_open"),
        ([Open(id=1), Reset(id=2), Step(id=3, action=99)], "invalid_action"),
        (
            [
                Open(id=1, config={"episode_length": 1}),
                Reset(id=2),
                Step(id=3, action=0),
                Step(id=4, action=0),
            ],
            "episode_over",
        ),
        ([Open(id=1, config={"no_such_option": 1})], "bad_config"),
    ],
)
def test_non_fatal_errors_name_the_problem_and_keep_the_session(
    frames: list[object], code: str
) -> None:
    session = ServerSession(fake_factory, max_frame_size=1 << 20)
    for frame in frames[:-1]:
        reply, _ = serve(session, frame)
        assert not isinstance(reply, Error), reply
    state_before = session.state
    reply, close = serve(session, frames[-1])
    assert isinstance(reply, Error) and reply.code == code and reply.fatal is False
    assert reply.id == frames[-1].id  # type: ignore[attr-defined]
    assert close is None and session.state is state_before
    assert len(reply.message) > 20


def test_session_usable_after_non_fatal_error() -> None:
    session = opened_session()
    serve(session, Reset(id=2, seed=1))
    reply, _ = serve(session, Step(id=3, action=-1))
    assert isinstance(reply, Error) and reply.code == "invalid_action"
    reply, _ = serve(session, Step(id=4, action=1))
    assert isinstance(reply, Result) and reply.info["step"] == 1


def test_unsupported_version_is_fatal_with_1002() -> None:
    session = ServerSession(fake_factory, max_frame_size=1 << 20)
    reply, close = serve(session, Open(id=1, version=7))
    assert isinstance(reply, Error) and reply.code == "unsupported_version" and reply.fatal
    assert "speaks 1" in reply.message
    assert close is not None and close.code == 1002


@pytest.mark.parametrize(
    ("data", "code", "close_code", "rid"),
    [
        (b"\xc1", "bad_frame", 1002, None),
        (msgpack.packb([1, 2]), "bad_frame", 1002, None),
        (msgpack.packb({"op": "step"}), "bad_frame", 1002, None),
        (msgpack.packb({"op": "dance", "id": 4}), "unknown_op", None, 4),
        (msgpack.packb({"op": "step", "id": 5, "action": b"left"}), "bad_request", None, 5),
    ],
)
def test_malformed_frames(data: bytes, code: str, close_code: int | None, rid: int | None) -> None:
    session = opened_session()
    reply, close = session.handle(data)
    frame = decode_server_frame(reply)
    assert isinstance(frame, Error) and frame.code == code and frame.id == rid
    assert (close.code if close else None) == close_code


def test_oversize_frame_is_refused_before_decoding() -> None:
    session = ServerSession(fake_factory, max_frame_size=100)
    reply, close = session.handle(b"\x80" + b"\x00" * 200)
    frame = decode_server_frame(reply)
    assert isinstance(frame, Error) and frame.code == "too_big"
    assert close is not None and close.code == 1009


def test_environment_failure_is_internal_and_fatal() -> None:
    session = opened_session(fail_at_step=2)
    serve(session, Reset(id=2))
    serve(session, Step(id=3, action=0))
    reply, close = serve(session, Step(id=4, action=0))
    assert isinstance(reply, Error) and reply.code == "internal" and reply.fatal
    assert "RuntimeError" in reply.message
    assert close is not None and close.code == 1011


def test_capacity_refusal_and_release() -> None:
    admitted: list[object] = []

    def admit(session: ServerSession) -> tuple[str, str] | None:
        return ("capacity", "full") if admitted else None

    first = ServerSession(
        fake_factory, max_frame_size=1 << 20, admit=admit, release=lambda s: admitted.clear()
    )
    reply, _ = serve(first, Open(id=1))
    admitted.append(first)
    second = ServerSession(fake_factory, max_frame_size=1 << 20, admit=admit)
    reply, close = serve(second, Open(id=1))
    assert isinstance(reply, Error) and reply.code == "capacity" and close is not None
    assert close.code == 1013
    first.close()
    first.close()  # idempotent
    assert admitted == []


def test_snapshot_restore_replays() -> None:
    session = opened_session(episode_length=100)
    serve(session, Reset(id=2, seed=3))
    serve(session, Step(id=3, action=1))
    snap, _ = serve(session, Snapshot(id=4))
    assert isinstance(snap, SnapshotData)
    first = [serve(session, Step(id=5 + i, action=a))[0] for i, a in enumerate([2, 3, 1])]
    restored, _ = serve(session, Restore(id=20, snapshot=snap.snapshot))
    assert isinstance(restored, Result)
    again = [serve(session, Step(id=21 + i, action=a))[0] for i, a in enumerate([2, 3, 1])]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.obs, b.obs)  # type: ignore[attr-defined]


def _reordered(rid: int, action: object, obs: bool = True) -> bytes:
    """A step whose map lists its keys in another order: read by the full decoder."""
    data: bytes = msgpack.packb({"obs": obs, "action": action, "id": rid, "op": "step"})
    return data


def test_the_step_loop_reader_and_the_full_decoder_serve_alike() -> None:
    """Canonical steps (read without a full decode) get the replies, errors and
    state changes that the same steps laid out differently get."""
    quick = opened_session(episode_length=4)
    full = opened_session(episode_length=4)
    assert quick.handle(encode(Reset(id=2, seed=3))) == full.handle(encode(Reset(id=2, seed=3)))
    script: list[tuple[int, int, bool]] = [
        (3, 1, True),
        (4, 9, True),  # not an action of the environment: invalid_action
        (300, 2, False),  # a two-byte id, no observation
        (70000, 3, True),
        (2**32 - 1, 0, True),  # the episode ends here
        (8, 1, True),  # episode_over
    ]
    for rid, action, obs in script:
        canonical = encode(Step(id=rid, action=action, obs=obs))
        assert parse_step(canonical) == (rid, action, obs)
        assert parse_step(_reordered(rid, action, obs)) is None
        assert quick.handle(canonical) == full.handle(_reordered(rid, action, obs))
        assert quick.state is full.state and quick.steps == full.steps
    assert quick.state is SessionState.ENDED
    reply = decode_server_frame(quick.handle(encode(Step(id=9, action=1)))[0])
    assert isinstance(reply, Error) and reply.code == "episode_over" and reply.id == 9
    # A failing environment is fatal on either path, with the request's id.
    for data in (encode(Step(id=11, action=0)), _reordered(11, 0)):
        session = opened_session(fail_at_step=2)
        session.handle(encode(Reset(id=2)))
        session.handle(encode(Step(id=3, action=0)))
        reply, close = session.handle(data)
        frame = decode_server_frame(reply)
        assert isinstance(frame, Error) and frame.code == "internal" and frame.id == 11
        assert close is not None and close.code == 1011
