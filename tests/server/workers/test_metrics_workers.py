"""``/metrics`` behind ``serve --workers 2``: whichever worker answers, the counts are the server's."""

from __future__ import annotations

import time
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from openenv_ws.client.vector import VectorEnvClient
from openenv_ws.errors import RemoteEnvError
from openenv_ws.providers import LocalServerProvider

from ...conftest import UNIT

Sample = tuple[str, tuple[tuple[str, str], ...]]


def _scrape(http_url: str) -> dict[Sample, float]:
    """Every sample of one ``GET /metrics`` (a new connection: either worker may answer)."""
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=5 * UNIT) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_worker_reports_the_whole_servers_counts() -> None:
    sessions, steps = 12, 7
    with (
        LocalServerProvider(args=["--workers", "2", "--env", "fake", "--no-web"]) as server,
        VectorEnvClient(server.url, sessions, config={"obs_shape": [2]}) as envs,
    ):
        envs.reset(seed=0)
        for _ in range(steps):
            envs.step(np.ones(sessions, np.int64))
        with pytest.raises(RemoteEnvError, match="invalid_action"):
            envs.step(np.full(sessions, 99, np.int64))  # refused by every env, non-fatal
        health = server.health(timeout=5 * UNIT)
        assert health is not None
        per_worker = [w["sessions"] for w in health["workers"]]
        assert sorted(per_worker) != [0, sessions], per_worker  # both workers host some
        want: dict[Sample, float] = {
            ("openenv_ws_step_seconds_count", ()): sessions * steps,
            ("openenv_ws_sessions", ()): sessions,
            ("openenv_ws_sessions_opened_total", ()): sessions,
            ("openenv_ws_errors_total", (("code", "invalid_action"),)): sessions,
            ("openenv_ws_workers", ()): 2,
        }
        answered: dict[float, dict[Sample, float | None]] = {}
        last: dict[Sample, float | None] = {}
        deadline = time.monotonic() + 20 * UNIT
        # Each worker adds the other's last snapshot (published every second) to its own.
        while len(answered) < 2:
            assert time.monotonic() < deadline, f"not every worker reached the totals: {last}"
            samples = _scrape(server.http_url)
            last = {key: samples.get(key) for key in want}
            if last == want:
                answered[samples[("openenv_ws_worker", ())]] = last
            else:
                time.sleep(0.05)
        assert set(answered) == {0.0, 1.0}
        # The step histogram's buckets add up the same way (+Inf holds every step).
        samples = _scrape(server.http_url)
        assert samples[("openenv_ws_step_seconds_bucket", (("le", "+Inf"),))] == sessions * steps
