"""Limits: frame size (checked before allocating), sessions, idle timeout, request timeout."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest

from openenv_ws import RemoteEnvError, RequestTimeout, SessionClosed
from openenv_ws.client import AsyncEnvClient, EnvClient
from openenv_ws.protocol import Error, Open, Opened, Reset, Step, decode_server_frame, encode

from ..._rawwire import OP_BINARY, OP_CONT, OP_PING, OP_PONG, RawWS, frame_bytes
from .conftest import UNIT, serve, wait_until
from .proxy import CutProxy

LIMIT = 64 * 1024
LONG = {"episode_length": 100_000}


def test_an_oversize_frame_is_refused_from_its_header_before_its_payload() -> None:
    """The header claims 2**40 bytes and no payload follows: the server cannot have
    buffered the frame, yet it closes with 1009 at once, so it decided from the length."""
    with serve(max_frame_size=LIMIT) as server, RawWS.to(server.url) as ws:
        ws.send(encode(Open(id=1)))
        assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)
        ws.send_raw(frame_bytes(OP_BINARY, b"", length=1 << 40)[:10])
        messages, code = ws.until_close(5 * UNIT)
        assert code == 1009 and messages == []
        wait_until(lambda: not server.server.config.app.state.registry.active, 5 * UNIT)


def test_a_fragmented_message_above_the_limit_is_refused_with_1009() -> None:
    with serve(max_frame_size=LIMIT) as server, RawWS.to(server.url) as ws:
        chunk = b"\x00" * (LIMIT // 4)
        ws.send(chunk, OP_BINARY, fin=False)
        for _ in range(3):
            ws.send(chunk, OP_CONT, fin=False)
        ws.send(b"\x00", OP_CONT)  # one byte over
        assert ws.until_close(5 * UNIT)[1] == 1009


def test_a_message_at_the_limit_is_decoded() -> None:
    with serve(max_frame_size=LIMIT) as server, RawWS.to(server.url) as ws:
        size = LIMIT - 100
        for _ in range(3):
            frame = msgpack.packb({"op": "open", "id": 1, "version": 1, "pad": b"x" * size})
            size += LIMIT - len(frame)
        assert len(frame) == LIMIT
        ws.send(frame)
        assert isinstance(decode_server_frame(ws.read_frame(5 * UNIT)[1]), Opened)


def test_parked_sessions_hold_their_slots_until_they_expire() -> None:
    grace = 0.5 * UNIT
    with serve(max_sessions=2, resume_grace=grace) as server, CutProxy(server.port) as proxy:
        first = EnvClient(proxy.url)
        second = EnvClient(server.url)
        proxy.cut()  # the first session is parked, its environment kept
        registry = server.server.config.app.state.registry
        wait_until(lambda: server.server.config.app.state.supervisor.store.parked, 5 * UNIT)
        with pytest.raises(RemoteEnvError) as info:
            EnvClient(server.url)
        assert info.value.code == "capacity" and info.value.fatal
        wait_until(lambda: len(registry.active) == 1, 10 * UNIT, what="parked session expired")
        with EnvClient(server.url) as third:
            third.reset()
        second.close()
        first.close()


def test_an_idle_connection_is_closed_with_1001_and_its_session_freed() -> None:
    idle = 0.4 * UNIT
    with serve(idle_timeout=idle) as server:
        registry = server.server.config.app.state.registry
        env = EnvClient(server.url)
        env.reset()
        wait_until(lambda: not registry.active, 10 * UNIT + idle, what="idle session closed")
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        assert info.value.close_code == 1001 and "idle timeout" in info.value.reason
        env.close()
        # A connection that never opened a session is closed the same way.
        with RawWS.to(server.url) as ws:
            messages, code = ws.until_close(10 * UNIT + idle)
            assert code == 1001
            error = decode_server_frame(messages[-1])
            assert isinstance(error, Error) and error.code == "idle_timeout" and error.id is None
        supervisor = server.server.config.app.state.supervisor
        assert supervisor.metrics.counters["idle_closed"] == 2


def test_a_busy_connection_is_not_idle() -> None:
    idle = 0.4 * UNIT
    with serve(idle_timeout=idle) as server, EnvClient(server.url, config=LONG) as env:
        env.reset()
        end = time.monotonic() + 4 * idle
        steps = 0
        while time.monotonic() < end:
            env.step(steps % 4)
            steps += 1
            time.sleep(idle / 8)
        assert env.state()["step_count"] == steps


def test_a_timed_out_request_never_answers_a_later_one() -> None:
    """The step's reply arrives after its timeout; the next request gets its own reply."""
    with serve() as server, EnvClient(server.url, config={"step_sleep": 0.5 * UNIT}) as env:
        env.reset(seed=1)
        with pytest.raises(RequestTimeout):
            env.step(2, timeout=0.05 * UNIT)
        state = env.state(timeout=10 * UNIT)  # the late 'result' comes first and is skipped
        assert state["step_count"] == 1
        assert env.step(3, timeout=10 * UNIT).info == {"step": 2}


async def test_async_timed_out_request_never_answers_a_later_one() -> None:
    with serve() as server:
        async with AsyncEnvClient(server.url, config={"step_sleep": 0.5 * UNIT}) as env:
            await env.reset(seed=1)
            with pytest.raises(RequestTimeout):
                await env.step(2, timeout=0.05 * UNIT)
            assert (await env.state(timeout=10 * UNIT))["step_count"] == 1
            assert (await env.step(3, timeout=10 * UNIT)).info == {"step": 2}


def test_a_peer_that_never_answers_pings_is_dropped_and_its_session_freed() -> None:
    """At the socket level: a peer that stays connected but never sends a pong."""
    interval, timeout = 0.2 * UNIT, 0.3 * UNIT
    with serve(ping_interval=interval, ping_timeout=timeout, resume_grace=0) as server:
        registry = server.server.config.app.state.registry
        with RawWS.to(server.url) as ws:
            ws.send(encode(Open(id=1)))
            ws.send(encode(Reset(id=2, seed=0)))
            seen = []
            start = time.monotonic()
            while True:  # read everything, answer nothing
                try:
                    opcode, _ = ws.read_frame(10 * UNIT)
                except (EOFError, ConnectionError):
                    break
                seen.append(opcode)
                if opcode == 8:
                    break
            assert OP_PING in seen and OP_PONG not in seen and seen[-1] == 8
            wait_until(lambda: not registry.active, 5 * UNIT, what="session freed")
        assert time.monotonic() - start < interval + timeout + 5 * UNIT


def test_a_sync_client_dropped_by_the_heartbeat_resumes_transparently() -> None:
    """A sync client whose pings go unanswered (its guard held: neither a call nor the
    heartbeat thread reads) is dropped, and its next call resumes the session."""
    interval, timeout = 0.2 * UNIT, 0.2 * UNIT
    with serve(ping_interval=interval, ping_timeout=timeout) as server:
        supervisor = server.server.config.app.state.supervisor
        with EnvClient(server.url) as env:
            env.reset(seed=3)
            env.step(1)
            with env._link._guard.lock:
                wait_until(lambda: supervisor.store.parked == 1, 10 * UNIT, what="dropped")
            assert env.step(2).info == {"step": 2}
            assert supervisor.metrics.counters["sessions_resumed"] == 1


def test_concurrent_resumes_and_steps_keep_sessions_apart() -> None:
    with serve() as server, CutProxy(server.port) as proxy:
        errors: list[BaseException] = []

        def run(seed: int) -> None:
            try:
                with EnvClient(proxy.url, config=LONG) as env:
                    env.reset(seed=seed)
                    for t in range(200):
                        r = env.step(t % 4)
                        assert r.info == {"step": t + 1}
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for _ in range(5):
            time.sleep(0.05 * UNIT)
            proxy.cut()
        for t in threads:
            t.join(60 * UNIT)
        assert not errors, errors
        assert proxy.cuts == 5


def test_unknown_bytes_in_a_step_are_bad_request_not_a_crash() -> None:
    with serve() as server, RawWS.to(server.url) as ws:
        ws.send(encode(Open(id=1)))
        ws.send(encode(Reset(id=2)))
        ws.send(encode(Step(id=3, action=[[[[[[[[[[1]]]]]]]]]])))
        replies = [decode_server_frame(ws.read_frame(5 * UNIT)[1]) for _ in range(3)]
        assert isinstance(replies[2], Error) and replies[2].code == "bad_request"
