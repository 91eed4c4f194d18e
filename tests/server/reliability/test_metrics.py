"""``/metrics`` (Prometheus text format) and ``/health`` follow what the server does."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from openenv_ws import RemoteEnvError
from openenv_ws.client import EnvClient
from openenv_ws.server.runtime.metrics import LatencyHistogram

from .conftest import UNIT, health, serve, wait_until
from .proxy import CutProxy


def scrape(http_url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = httpx.get(f"{http_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def one(samples: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> float:
    (value,) = samples[name].values()
    return value


def test_metrics_count_sessions_errors_and_steps() -> None:
    with serve() as server, CutProxy(server.port) as proxy:
        url = server.http_url
        before = scrape(url)
        assert one(before, "openenv_ws_sessions") == 0
        assert one(before, "openenv_ws_step_seconds_count") == 0
        assert one(before, "openenv_ws_process_resident_memory_bytes") > 0
        with EnvClient(proxy.url, config={"episode_length": 100}) as env:
            with pytest.raises(RemoteEnvError):
                env.step(0)  # not_reset
            env.reset(seed=0)
            for t in range(25):
                env.step(t % 4)
            with pytest.raises(RemoteEnvError):
                env.step(9)  # invalid_action
            proxy.cut()
            env.step(1)  # resumed
            during = scrape(url)
            assert one(during, "openenv_ws_sessions") == 1
            assert one(during, "openenv_ws_connections") == 1
            assert one(during, "openenv_ws_sessions_opened_total") == 1
            assert one(during, "openenv_ws_sessions_resumed_total") == 1
        after = scrape(url)
        assert one(after, "openenv_ws_step_seconds_count") == 26
        buckets = after["openenv_ws_step_seconds_bucket"]
        assert buckets[(("le", "+Inf"),)] == 26
        counts = [v for _, v in sorted(buckets.items(), key=lambda kv: float(kv[0][0][1]))]
        assert counts == sorted(counts)  # cumulative
        assert 0 < one(after, "openenv_ws_step_seconds_sum") < 26 * 10 * UNIT
        errors = after["openenv_ws_errors_total"]
        assert errors[(("code", "not_reset"),)] == 1
        assert errors[(("code", "invalid_action"),)] == 1
        wait_until(lambda: one(scrape(url), "openenv_ws_sessions") == 0, 5 * UNIT)


def test_health_reports_sessions_parked_and_connections() -> None:
    with serve() as server, CutProxy(server.port) as proxy:
        h = health(server.http_url)
        assert h["status"] == "ok" and h["sessions"] == 0 and h["parked"] == 0
        assert h["connections"] == 0 and h["draining"] is False and h["pid"] > 0
        env = EnvClient(proxy.url)
        assert health(server.http_url)["sessions"] == 1
        proxy.cut()
        wait_until(lambda: health(server.http_url)["parked"] == 1, 5 * UNIT)
        h = health(server.http_url)
        assert h["sessions"] == 1 and h["connections"] == 0
        env.reset()  # resumes
        h = health(server.http_url)
        assert (h["sessions"], h["parked"], h["connections"]) == (1, 0, 1)
        env.close()


def test_latency_histogram_buckets() -> None:
    hist = LatencyHistogram((0.001, 0.01))
    for value in (0.0005, 0.001, 0.002, 0.5):
        hist.observe(value)
    assert hist.cumulative() == [("0.001", 2), ("0.01", 3), ("+Inf", 4)]
    assert hist.count == 4 and hist.total == pytest.approx(0.5035)


def test_spec_lists_every_metric_and_health_field() -> None:
    spec = (Path(__file__).resolve().parents[3] / "protocol" / "SPEC.md").read_text()
    section = spec[spec.index("### 16.7 Health and metrics") :]
    documented = set(re.findall(r"`(openenv_ws_[a-z_]+)", section))
    with serve() as server:
        with EnvClient(server.url) as env:  # so that every counter has a sample
            env.reset()
        families = {
            f.name
            for f in text_string_to_metric_families(httpx.get(f"{server.http_url}/metrics").text)
        }
        fields = set(health(server.http_url))
    exposed = {name for name in families if not name.startswith("openenv_ws_process_")}
    counters = {n.removesuffix("_total") for n in documented if n.endswith("_total")}
    assert exposed - {n for n in documented if not n.endswith("_total")} == counters
    assert "openenv_ws_process_*" in section or "openenv_ws_process_" in section
    for name in ("status", "protocol", "sessions", "parked", "connections", "draining"):
        assert name in fields and f"`{name}`" in section


def test_garbage_collector_pauses_are_measured_by_generation() -> None:
    import gc

    with serve() as server:
        before = scrape(server.http_url)
        gc.collect()  # a full collection of this process (the server runs in it)
        after = scrape(server.http_url)
    count = "openenv_ws_process_gc_pause_seconds_count"
    total = "openenv_ws_process_gc_pause_seconds_sum"
    full = (("generation", "2"),)
    assert after[count][full] >= before[count][full] + 1
    assert after[total][full] > before[total][full]
    assert set(after[count]) == {(("generation", str(g)),) for g in range(3)}


@pytest.mark.parametrize("flags", [[], ["--no-gc-freeze"]], ids=["default", "no-freeze"])
def test_serve_freezes_what_it_built_before_serving(flags: list[str]) -> None:
    from openenv_ws.providers import LocalServerProvider

    with LocalServerProvider(args=["--env", "fake", "--no-web", *flags]) as server:
        frozen = one(scrape(server.http_url), "openenv_ws_process_gc_frozen_objects")
    if flags:
        assert frozen == 0
    else:
        assert frozen > 10_000  # the modules and the app: tens of thousands of objects
