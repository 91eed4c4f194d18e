"""VectorSessionClient over wss://: the same batches as in process, shared memory
still used on loopback, and a certificate from an unknown CA refused."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from openenv_ws import TLSError, VectorSessionClient
from openenv_ws.server import ServerThread
from openenv_ws.testing import FakeEnvironment

from ...tls.conftest import Pki, pki, tls_thread  # noqa: F401 - pki is a fixture

CONFIG = {"episode_length": 1000, "obs_shape": [64, 64]}


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[ServerThread]:  # noqa: F811 - the fixture above
    with tls_thread(pki.server) as running:
        yield running


@pytest.mark.parametrize("shared_memory", [True, False])
def test_vector_session_over_wss(server: ServerThread, pki: Pki, shared_memory: bool) -> None:  # noqa: F811
    assert server.url.startswith("wss://")
    reference = [FakeEnvironment(CONFIG) for _ in range(3)]
    with VectorSessionClient(
        server.url, 3, config=CONFIG, ca_file=pki.ca_file, shared_memory=shared_memory
    ) as envs:
        assert envs.shared_memory_used is shared_memory
        obs, _ = envs.reset(seed=4)
        want = [env.reset(seed=4 + i).obs for i, env in enumerate(reference)]
        np.testing.assert_array_equal(obs, np.stack(want))
        for t in range(20):
            actions = np.array([t % 4, (t + 1) % 4, (t + 2) % 4])
            obs, rewards, *_ = envs.step(actions)
            results = [env.step(int(a)) for env, a in zip(reference, actions, strict=True)]
            np.testing.assert_array_equal(obs, np.stack([r.obs for r in results]))
            np.testing.assert_array_equal(rewards, [r.reward for r in results])


def test_unknown_ca_is_refused(server: ServerThread) -> None:
    with pytest.raises(TLSError, match="certificate verify failed"):
        VectorSessionClient(server.url, 2, config=CONFIG)
