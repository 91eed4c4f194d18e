"""VectorEnvClient through dropped connections: every env takes its session back.

The sessions go through a loopback proxy that resets every connection at
chosen moments (between rounds, while a request is on its way, while a reply
is on its way back). Each env's results must equal an uninterrupted
in-process run with the same seed and actions: no step lost, none applied
twice, with the batched ``step`` and with ``send``/``recv`` alike, and with
observations in shared memory as over the socket.
"""

from __future__ import annotations

import time

import pytest

from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.errors import SessionClosed

from ...server.reliability.conftest import UNIT, serve, server_then_killed, wait_until
from ...server.reliability.proxy import CutProxy
from .fake_rounds import actions, reference

N = 4
CONFIG = {"episode_length": 1000, "obs_shape": [64, 64]}  # 4 KiB: shared memory when offered
ROUNDS = 40
# Round -> how the connections are cut just before it.
CUTS = {4: "between", 11: "request", 19: "reply", 27: "between", 33: "reply"}


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("api", ["step", "send/recv"])
def test_vector_sessions_resume_through_cuts(api: str, shared_memory: bool) -> None:
    with serve(max_sessions=16) as server, CutProxy(server.port) as proxy:
        supervisor = server.server.config.app.state.supervisor
        with VectorEnvClient(
            proxy.url, N, config=CONFIG, shared_memory=shared_memory, timeout=30 * UNIT
        ) as envs:
            ids = list(envs.session_ids)
            obs, _ = envs.reset(seed=50)
            got = [[(obs[i].tobytes(), 0.0, 0) for i in range(N)]]
            for t in range(ROUNDS):
                if t in CUTS:
                    proxy.arm(CUTS[t])
                if api == "step":
                    obs, rewards, _, _, infos = envs.step(actions(t, N))
                    rows = {i: (obs[i].tobytes(), rewards[i], infos["step"][i]) for i in range(N)}
                else:
                    envs.send(actions(t, N))
                    rows = {}
                    while len(rows) < N:
                        obs, rewards, _, _, infos = envs.recv()
                        for k, i in enumerate(infos["env_id"]):
                            rows[int(i)] = (obs[k].tobytes(), rewards[k], infos["step"][k])
                got.append([rows[i] for i in range(N)])
                if CUTS.get(t) in ("request", "reply"):
                    assert proxy.timed_cut.is_set(), f"round {t}: the timed cut did not happen"
            assert envs.session_ids == ids  # the same sessions throughout
        assert got == reference(CONFIG, N, ROUNDS, 50)
        assert proxy.cuts == len(CUTS)
        counters = supervisor.metrics.counters
        assert counters["sessions_resumed"] == N * len(CUTS)
        # A swallowed reply is answered again from the server's reply cache.
        assert counters["replayed"] >= list(CUTS.values()).count("reply")
        wait_until(lambda: not supervisor.registry.active, 5 * UNIT, what="no sessions left")


def test_without_resume_a_cut_names_the_env() -> None:
    with (
        serve() as server,
        CutProxy(server.port) as proxy,
        VectorEnvClient(proxy.url, 2, config=CONFIG, resume=False) as envs,
    ):
        envs.reset(seed=0)
        proxy.cut()
        with pytest.raises(SessionClosed, match=r"env [01]: "):
            for t in range(5):
                envs.step(actions(t, N)[:2])


def test_a_server_that_is_gone_ends_the_resume_quickly() -> None:
    with server_then_killed() as url:
        envs = VectorEnvClient(url, 2, config=CONFIG, resume_timeout=30.0)
        envs.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(SessionClosed, match=r"env [01]: .*could not be resumed") as info:
        envs.step([1, 2])  # reconnections are refused: given up after a second, not 30 s
    assert info.value.close_code is None
    assert time.monotonic() - start < 20 * UNIT
    envs.close()
