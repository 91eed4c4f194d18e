"""EnvClient and AsyncEnvClient against a real uvicorn server on a loopback port."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from openenv_ws import InvalidState, RemoteEnvError, ServerUnavailable, SessionClosed
from openenv_ws.client import AsyncEnvClient, EnvClient
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.protocol import Error, Open, Opened, decode_server_frame, encode
from openenv_ws.server import ServerThread, bind_socket
from openenv_ws.testing import FakeEnvironment
from openenv_ws.wire.framing import OP_BINARY, frame_head

from ..conftest import UNIT


def free_port() -> int:
    sock = bind_socket()
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_sync_session_matches_in_process(fake_server: ServerThread) -> None:
    local = FakeEnvironment({"obs_shape": [6, 5, 3], "episode_length": 4})
    with EnvClient(fake_server.url, config={"obs_shape": [6, 5, 3], "episode_length": 4}) as env:
        assert env.spec.observation.shape == (6, 5, 3)
        r = env.reset(seed=11)
        np.testing.assert_array_equal(r.observation, local.reset(seed=11).obs)
        for action in [1, 2, 3, 0]:
            r = env.step(action)
            want = local.step(action)
            np.testing.assert_array_equal(r.observation, want.obs)
            assert r.reward == want.reward and r.terminated == want.terminated
        assert r.done and env.state()["step_count"] == 4
    assert env.closed


def test_step_without_observation(fake_server: ServerThread) -> None:
    with EnvClient(fake_server.url) as env:
        env.reset()
        r = env.step(1, obs=False)
        assert r.observation is None and r.info["step"] == 1


def test_non_fatal_errors_keep_the_session(fake_server: ServerThread) -> None:
    with EnvClient(fake_server.url, config={"n_actions": 3}) as env:
        with pytest.raises(RemoteEnvError) as info:
            env.step(0)
        assert info.value.code == "not_reset" and not info.value.fatal
        env.reset(seed=1)
        with pytest.raises(RemoteEnvError) as info:
            env.step(7)
        assert info.value.code == "invalid_action" and "[0, 3)" in info.value.message
        assert env.step(2).info["step"] == 1


def test_bad_config_refused_at_open(fake_server: ServerThread) -> None:
    with pytest.raises(RemoteEnvError) as info:
        EnvClient(fake_server.url, config={"obs_shape": "big"})
    assert info.value.code == "bad_config" and "obs_shape" in info.value.message


def test_fatal_error_closes_the_session_with_its_reason(fake_server: ServerThread) -> None:
    env = EnvClient(fake_server.url, config={"fail_at_step": 1})
    env.reset()
    with pytest.raises(RemoteEnvError) as info:
        env.step(0)
    assert info.value.code == "internal" and info.value.fatal
    with pytest.raises(SessionClosed) as closed:
        env.step(0)
    assert "internal" in str(closed.value)
    env.close()
    env.close()


def test_use_after_close_raises_invalid_state(fake_server: ServerThread) -> None:
    env = EnvClient(fake_server.url)
    env.close()
    with pytest.raises(InvalidState, match="closed"):
        env.reset()


def test_no_server_is_server_unavailable() -> None:
    port = free_port()
    with pytest.raises(ServerUnavailable, match=str(port)):
        EnvClient(f"ws://127.0.0.1:{port}", open_timeout=2 * UNIT)


def test_concurrent_sessions_do_not_interfere(fake_server: ServerThread) -> None:
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def play(seed: int) -> None:
        try:
            with EnvClient(fake_server.url, config={"episode_length": 1000}) as env:
                obs = [env.reset(seed=seed).observation]
                obs += [env.step((seed + i) % 4).observation for i in range(50)]
                results[seed] = obs
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=play, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30 * UNIT)
    assert not errors
    for seed, got in results.items():
        local = FakeEnvironment({"episode_length": 1000})
        want = [local.reset(seed=seed).obs] + [local.step((seed + i) % 4).obs for i in range(50)]
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    assert len(results) == 6


def test_capacity_closes_with_1013(fake_server: ServerThread) -> None:
    clients = [EnvClient(fake_server.url) for _ in range(8)]
    try:
        with pytest.raises(RemoteEnvError) as info:
            EnvClient(fake_server.url)
        assert info.value.code == "capacity" and info.value.fatal
    finally:
        for c in clients:
            c.close()
    with EnvClient(fake_server.url) as env:  # slots are released on close
        env.reset()


def raw_exchange(url: str, messages: list[bytes | str]) -> tuple[list[object], int | None]:
    """Send raw messages and collect decoded replies until the server closes."""
    replies: list[object] = []
    with connect(url, compression=None, max_size=None) as ws:
        try:
            for m in messages:
                ws.send(m)
            while True:
                replies.append(decode_server_frame(ws.recv(timeout=5 * UNIT)))
        except ConnectionClosed as exc:
            # The server may close while a large message is still being sent.
            return replies, exc.rcvd.code if exc.rcvd else ws.close_code
        except TimeoutError:
            return replies, None


def test_text_frame_is_refused_with_1003(fake_server: ServerThread) -> None:
    replies, code = raw_exchange(fake_server.url, ["hello"])
    assert code == 1003
    assert isinstance(replies[0], Error) and replies[0].code == "text_frame"


def test_garbage_is_bad_frame_with_1002(fake_server: ServerThread) -> None:
    replies, code = raw_exchange(fake_server.url, [encode(Open(id=1)), b"\x93\x01"])
    assert code == 1002
    assert isinstance(replies[-1], Error) and replies[-1].code == "bad_frame"


def test_oversize_message_is_closed_with_1009(fake_server: ServerThread) -> None:
    """The size limit is checked on the frame header, before any payload is read."""
    ws = BlockingWebSocket(fake_server.url)
    ws.send(encode(Open(id=1)))
    assert isinstance(ws.recv(decode_server_frame, timeout=5 * UNIT), Opened)
    # Only the header of a 2 MiB binary frame: with no payload bytes unread on the
    # server, its close frame reaches us instead of a connection reset.
    ws._sock.sendall(frame_head(OP_BINARY, 2 << 20, key=b"\0\0\0\0"))
    with pytest.raises(SessionClosed) as closed:
        ws.recv(decode_server_frame, timeout=5 * UNIT)
    assert closed.value.close_code == 1009
    with EnvClient(fake_server.url) as env:  # the server is fine afterwards
        env.reset()


def test_pipelined_requests_answer_in_order(fake_server: ServerThread) -> None:
    from openenv_ws.protocol import Reset, Step

    frames = [encode(Open(id=1)), encode(Reset(id=2, seed=0))]
    frames += [encode(Step(id=3 + i, action=i % 4)) for i in range(20)]
    with connect(fake_server.url, compression=None) as ws:
        for f in frames:
            ws.send(f)
        ids = [decode_server_frame(ws.recv(timeout=5 * UNIT)).id for _ in frames]
    assert ids == list(range(1, 23))


async def test_async_client_matches_in_process(fake_server: ServerThread) -> None:
    local = FakeEnvironment({"episode_length": 3})
    async with AsyncEnvClient(fake_server.url, config={"episode_length": 3}) as env:
        r = await env.reset(seed=4)
        np.testing.assert_array_equal(r.observation, local.reset(seed=4).obs)
        for a in [3, 1, 2]:
            r = await env.step(a)
            np.testing.assert_array_equal(r.observation, local.step(a).obs)
        assert r.done
        with pytest.raises(RemoteEnvError) as info:
            await env.step(0)
        assert info.value.code == "episode_over"
        assert (await env.state())["step_count"] == 3
    with pytest.raises(InvalidState):
        await env.step(0)


async def test_async_client_unavailable() -> None:
    port = free_port()
    with pytest.raises(ServerUnavailable):
        await AsyncEnvClient.connect(f"ws://127.0.0.1:{port}", open_timeout=2 * UNIT)
