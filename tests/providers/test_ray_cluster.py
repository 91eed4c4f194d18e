"""RayProvider on a real 2-node Ray cluster (both nodes on 127.0.0.1): placement and node loss."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from openenv_ws import SessionClosed
from openenv_ws.client import EnvClient
from openenv_ws.providers import RayProvider

from ..conftest import UNIT
from ._procs import descendants, wait_dead
from .conftest import assert_all_ended


@pytest.fixture
def two_nodes(ray_tmpdir: str) -> Iterator[tuple[Any, Any]]:
    """A head and a worker node of one CPU each, and the worker's node handle."""
    import ray
    from ray.cluster_utils import Cluster

    before = descendants()
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster, worker
    finally:
        started = descendants() - before
        ray.shutdown()
        cluster.shutdown()
        assert_all_ended(started, "the cluster's shutdown")


def test_servers_spread_over_the_nodes_and_a_lost_node_fails_only_its_sessions(
    two_nodes: tuple[Any, Any],
) -> None:
    cluster, worker = two_nodes
    with RayProvider(env="fake", host="127.0.0.1") as provider:
        assert len(provider.servers) == 2  # one per CPU of the cluster
        assert len({server.node_id for server in provider.servers}) == 2  # one per node
        (lost,) = [s for s in provider.servers if s.node_id == worker.node_id]
        (kept,) = [s for s in provider.servers if s.node_id != worker.node_id]
        envs = [EnvClient(url, timeout=30 * UNIT) for url in provider.urls * 2]
        try:
            for env in envs:
                env.reset(seed=2)
            cluster.remove_node(worker)
            assert wait_dead(lost.pid)
            for env in envs:
                if env.url == lost.url:
                    with pytest.raises(SessionClosed, match="dropped"):
                        env.step(1)
                else:
                    assert env.step(1).info["step"] == 1
            statuses = {status.server.url: status for status in provider.status()}
            assert statuses[kept.url].alive
            assert not statuses[lost.url].alive
            assert "node" in (statuses[lost.url].reason or "")
        finally:
            for env in envs:
                env.close()
