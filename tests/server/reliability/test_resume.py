"""Resume: a dropped connection mid-episode costs nothing; the same client object carries on.

Connections go through a loopback proxy that the tests cut (TCP reset both
ways, no close frame) between requests, while a request is on its way (the
server never sees it) and while its reply is on its way back (the server
served it; the client never sees the reply and re-sends it). In every case
the episode goes on exactly as an uninterrupted run with the same seed and
actions: no step lost, none applied twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from atari import AsyncAtariEnv, AtariEnv, AtariEnvironment, atari_factory
from openenv_ws import SessionClosed
from openenv_ws.client import AsyncEnvClient, EnvClient
from openenv_ws.client._ws import BlockingWebSocket
from openenv_ws.protocol import Open, Opened, Reset, Result, Step, decode_server_frame, encode
from openenv_ws.testing import FakeEnvironment

from .conftest import UNIT, serve, server_then_killed, wait_until
from .proxy import CutProxy

CONFIG = {"episode_length": 1000, "obs_shape": [8, 8]}
ACTIONS = [(7 * t + 3) % 4 for t in range(60)]
# Step index -> how the connection is cut just before that step.
CUTS: dict[int, str] = {5: "between", 17: "request", 29: "reply", 41: "reply", 53: "request"}


def reference(seed: int) -> list[tuple[Any, ...]]:
    env = FakeEnvironment(CONFIG)
    out = [outcome(env.reset(seed=seed))]
    out += [outcome(env.step(a)) for a in ACTIONS]
    return out


def outcome(r: Any) -> tuple[Any, ...]:
    obs = getattr(r, "observation", getattr(r, "obs", None))
    return (np.asarray(obs).tobytes(), r.reward, r.terminated, r.truncated, r.info.get("step"))


def play(env: EnvClient[Any], proxy: CutProxy, seed: int) -> list[tuple[Any, ...]]:
    out = [outcome(env.reset(seed=seed, episode_id=f"episode-{seed}"))]
    for t, action in enumerate(ACTIONS):
        if t in CUTS:
            proxy.arm(CUTS[t])
        out.append(outcome(env.step(action)))
        if CUTS.get(t) in ("request", "reply"):
            assert proxy.timed_cut.is_set(), "the timed cut did not happen"
    return out


def test_sync_client_resumes_through_cuts_with_identical_results() -> None:
    with serve() as server, CutProxy(server.port) as proxy:
        supervisor = server.server.config.app.state.supervisor
        with EnvClient(proxy.url, config=CONFIG) as env:
            session_id = env.session_id
            got = play(env, proxy, seed=42)
            state = env.state()
            assert env.session_id == session_id
        assert got == reference(42)
        assert proxy.cuts == len(CUTS)
        assert state["step_count"] == len(ACTIONS) and state["episode_id"] == "episode-42"
        counters = supervisor.metrics.counters
        assert counters["sessions_resumed"] == len(CUTS)
        # Each swallowed reply was re-sent and answered from the cache, not stepped again.
        assert counters["replayed"] == list(CUTS.values()).count("reply")
        wait_until(lambda: not supervisor.registry.active, 5 * UNIT, what="no sessions left")


async def test_async_client_resumes_through_cuts_with_identical_results() -> None:
    with serve() as server, CutProxy(server.port) as proxy:
        async with AsyncEnvClient(proxy.url, config=CONFIG) as env:
            out = [outcome(await env.reset(seed=7))]
            for t, action in enumerate(ACTIONS):
                if t in CUTS:
                    proxy.arm(CUTS[t])
                out.append(outcome(await env.step(action)))
            assert (await env.state())["step_count"] == len(ACTIONS)
        assert out == reference(7)
        assert proxy.cuts == len(CUTS)


def atari_run(step: Callable[[int], Any], reset: Callable[[], Any]) -> list[tuple[Any, ...]]:
    first = reset()
    out = [(np.asarray(first[0]).tobytes(), 0.0, False)]
    for t in range(80):
        obs, reward, done = step(t)
        out.append((np.asarray(obs).tobytes(), reward, done))
    return out


def test_atari_episode_continues_the_same_game_after_cuts() -> None:
    config = {"game": "breakout", "obs_type": "rgb"}
    actions = [(t // 3) % 4 for t in range(80)]
    local = AtariEnvironment(config)

    def local_reset() -> Any:
        return (local.reset(seed=5).obs,)

    def local_step(t: int) -> Any:
        r = local.step(actions[t])
        return r.obs, r.reward, r.terminated or r.truncated

    want = atari_run(local_step, local_reset)
    local.close()
    cuts = {10: "reply", 30: "between", 50: "request", 70: "reply"}
    with serve(atari_factory) as server, CutProxy(server.port) as proxy:
        with AtariEnv(proxy.url, **config) as env:

            def remote_reset() -> Any:
                return (env.reset(seed=5).observation.screen,)

            def remote_step(t: int) -> Any:
                if t in cuts:
                    proxy.arm(cuts[t])
                r = env.step(actions[t])
                return r.observation.screen, r.reward, r.done

            got = atari_run(remote_step, remote_reset)
            state = env.state()
        assert proxy.cuts == len(cuts)
    assert got == want
    assert state.step_count == 80


async def test_async_atari_client_resumes() -> None:
    with serve(atari_factory) as server, CutProxy(server.port) as proxy:
        async with AsyncAtariEnv(proxy.url, game="pong") as env:
            await env.reset(seed=1)
            proxy.swallow_next_reply()
            await env.step(1)
            proxy.cut()
            await env.step(2)
            assert (await env.state()).step_count == 2
        assert proxy.cuts == 2


def test_resume_after_the_grace_period_is_a_clear_session_closed() -> None:
    grace = 0.3 * UNIT
    with serve(resume_grace=grace) as server, CutProxy(server.port) as proxy:
        supervisor = server.server.config.app.state.supervisor
        env = EnvClient(proxy.url, config=CONFIG)
        env.reset(seed=1)
        proxy.cut()
        wait_until(lambda: supervisor.store.parked == 1, 5 * UNIT, what="session parked")
        wait_until(lambda: not supervisor.registry.active, 5 * UNIT + grace, what="expiry")
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        message = str(info.value)
        assert "could not be resumed" in message and "unknown or its session expired" in message
        with pytest.raises(SessionClosed):  # and it stays closed, saying the same
            env.step(0)
        env.close()
        assert supervisor.metrics.counters["sessions_expired"] == 1


def test_no_resume_when_the_server_keeps_no_sessions() -> None:
    with serve(resume_grace=0) as server, CutProxy(server.port) as proxy:
        env = EnvClient(proxy.url, config=CONFIG)
        env.reset(seed=1)
        assert env._core.resume_token is None
        proxy.cut()
        with pytest.raises(SessionClosed) as info:
            env.step(0)
        assert info.value.close_code is None
        env.close()
        supervisor = server.server.config.app.state.supervisor
        wait_until(lambda: not supervisor.registry.active, 5 * UNIT, what="session freed")


def test_resume_fails_fast_when_the_server_is_gone() -> None:
    with server_then_killed() as url:
        env = EnvClient(url, config=CONFIG)
        env.reset(seed=1)
    start = time.monotonic()
    with pytest.raises(SessionClosed) as info:
        env.step(0)  # the reconnection is refused: given up after a second, not 30 s
    assert info.value.close_code is None and "could not be resumed" in str(info.value)
    assert time.monotonic() - start < 20 * UNIT
    env.close()


def raw_open(url: str, **fields: Any) -> tuple[BlockingWebSocket, Any]:
    ws = BlockingWebSocket(url, open_timeout=5 * UNIT)
    ws.send(encode(Open(id=1, config=CONFIG, **fields)))
    return ws, ws.recv(decode_server_frame, timeout=5 * UNIT)


def test_a_resume_takes_over_a_connection_the_server_still_thinks_alive() -> None:
    with serve() as server:
        first, opened = raw_open(server.url)
        assert isinstance(opened, Opened) and opened.resume_token
        first.send(encode(Reset(id=2, seed=3)))
        first.recv(decode_server_frame, timeout=5 * UNIT)
        first.send(encode(Step(id=3, action=1)))
        want = first.recv(decode_server_frame, timeout=5 * UNIT)
        # A second connection resumes while the first is still open (a half-open peer).
        second, again = raw_open(server.url, resume=opened.resume_token)
        assert isinstance(again, Opened) and again.session_id == opened.session_id
        assert again.spec == opened.spec and again.resume_token == opened.resume_token
        # The re-sent request is answered from the cache: same bytes, no second step.
        second.send(encode(Step(id=3, action=1)))
        replayed = second.recv(decode_server_frame, timeout=5 * UNIT)
        assert isinstance(replayed, Result) and replayed.info == want.info == {"step": 1}
        second.send(encode(Step(id=4, action=2)))
        assert second.recv(decode_server_frame, timeout=5 * UNIT).info == {"step": 2}
        with pytest.raises(SessionClosed) as info:
            first.recv(decode_server_frame, timeout=5 * UNIT)
        assert info.value.close_code == 1001 and "another connection" in info.value.reason
        second.close()


@pytest.mark.parametrize(
    "token", ["nonsense", "abc.def", "", "x" * 300], ids=["plain", "dotted", "empty", "long"]
)
def test_a_wrong_resume_token_is_resume_failed_1008(token: str) -> None:
    with serve() as server:
        ws, reply = raw_open(server.url, resume=token)
        assert reply.code == "resume_failed" and reply.fatal
        with pytest.raises(SessionClosed) as info:
            ws.recv(decode_server_frame, timeout=5 * UNIT)
        assert info.value.close_code == 1008


def test_a_stolen_session_id_without_its_secret_does_not_resume() -> None:
    with serve() as server:
        ws, opened = raw_open(server.url)
        session_id = opened.resume_token.partition(".")[0]
        thief, reply = raw_open(server.url, resume=f"{session_id}.{'A' * 32}")
        assert reply.code == "resume_failed"
        thief.close()
        ws.send(encode(Reset(id=2, seed=0)))
        assert isinstance(ws.recv(decode_server_frame, timeout=5 * UNIT), Result)  # unharmed
        ws.close()
