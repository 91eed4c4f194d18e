"""VectorSessionClient through dropped connections: the vector session is taken back.

The session goes through a loopback proxy that resets its connection at chosen
moments (between rounds, while a request is on its way, while a reply is on
its way back). The batches must equal an uninterrupted in-process run with the
same seed and actions: no step lost, none applied twice, with ``step`` and with
``send``/``recv`` alike, through shared memory as over the socket.
"""

from __future__ import annotations

import numpy as np
import pytest

from openenv_ws import VectorSessionClient

from ...server.reliability.conftest import UNIT, serve, wait_until
from ...server.reliability.proxy import CutProxy
from ..vector.fake_rounds import actions, reference

N = 4
CONFIG = {"episode_length": 1000, "obs_shape": [64, 64]}  # 16 KiB a batch: shared memory
ROUNDS = 30
# Round -> how the connection is cut just before it.
CUTS = {4: "between", 11: "request", 19: "reply", 25: "reply"}


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("api", ["step", "send/recv"])
def test_vector_session_resumes_through_cuts(api: str, shared_memory: bool) -> None:
    with serve(max_sessions=16) as server, CutProxy(server.port) as proxy:
        supervisor = server.server.config.app.state.supervisor
        with VectorSessionClient(
            proxy.url, N, config=CONFIG, shared_memory=shared_memory, timeout=30 * UNIT
        ) as envs:
            session = envs.session_id
            assert envs.shared_memory_used is shared_memory
            obs, _ = envs.reset(seed=50)
            got = [[(obs[i].tobytes(), 0.0, 0) for i in range(N)]]
            for t in range(ROUNDS):
                if t in CUTS:
                    proxy.arm(CUTS[t])
                if api == "step":
                    obs, rewards, _, _, infos = envs.step(actions(t, N))
                else:
                    envs.send(actions(t, N)[::-1], np.arange(N)[::-1])
                    obs, rewards, _, _, infos = envs.recv()
                    assert infos["env_id"].tolist() == list(range(N))
                got.append([(obs[i].tobytes(), rewards[i], infos["step"][i]) for i in range(N)])
                if CUTS.get(t) in ("request", "reply"):
                    assert proxy.timed_cut.is_set(), f"round {t}: the timed cut did not happen"
            assert envs.session_id == session  # the same session throughout
        assert got == reference(CONFIG, N, ROUNDS, 50)
        assert proxy.cuts == len(CUTS)
        counters = supervisor.metrics.counters
        assert counters["sessions_resumed"] == len(CUTS)
        # A swallowed reply is answered again from the server's reply cache.
        assert counters["replayed"] >= list(CUTS.values()).count("reply")
        wait_until(lambda: not supervisor.registry.active, 5 * UNIT, what="no sessions left")
