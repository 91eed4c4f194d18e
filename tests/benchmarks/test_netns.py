"""The remote scenario's namespace and veth pair: made, shaped, and always removed.

Needs root and iproute2 (skipped elsewhere; in CI, which runs as root, a
skip is a failure).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from benchmarks import netns
from benchmarks.scenarios.remote import bulk_mbit
from tests.conftest import UNIT

# One test at a time makes or cleans namespaces: a clean_stale() of one would remove
# what another's killed holder left before that test looks.
pytestmark = pytest.mark.exclusive("netns")


@pytest.fixture(autouse=True)
def _root() -> None:
    why = netns.unavailable()
    if why is not None:
        pytest.skip(why)


def test_link_carries_traffic_and_is_removed() -> None:
    with netns.namespace_link() as link:
        assert set(netns.owned_by(os.getpid())) == {link.namespace, link.host_dev}
        netns.shape(link, 100_000_000, 4096)
        qdisc = subprocess.run(
            link.command(["tc", "qdisc", "show", "dev", link.ns_dev]),
            capture_output=True,
            text=True,
        ).stdout
        assert "tbf" in qdisc and "100Mbit" in qdisc, qdisc
        before = link.counters()
        assert 0 < bulk_mbit(link, 0.2 * UNIT) < 150  # bulk TCP through the 100 Mbit/s bucket
        received, sent = link.counters()
        assert received > before[0] and sent - before[1] > 1_000_000
    assert netns.owned_by(os.getpid()) == []


def test_removed_on_ctrl_c() -> None:
    with pytest.raises(KeyboardInterrupt), netns.namespace_link():
        raise KeyboardInterrupt
    assert netns.owned_by(os.getpid()) == []


def test_two_links_do_not_collide() -> None:
    with netns.namespace_link() as one, netns.namespace_link() as two:
        assert one.namespace != two.namespace and one.host_dev != two.host_dev
        assert one.ns_ip != two.ns_ip
    assert netns.owned_by(os.getpid()) == []


#: A run that holds a link until it is stopped.
HOLDER = """
import time
from benchmarks import netns
with netns.namespace_link() as link:
    print(link.namespace, flush=True)
    time.sleep(600)
"""


def hold_then(stop: signal.Signals) -> list[str]:
    """What a run holding a link leaves after `stop`."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        child.stdout.readline()
        assert len(netns.owned_by(child.pid)) == 2
        child.send_signal(stop)
        child.wait(timeout=30 * UNIT)
    return netns.owned_by(child.pid)


def test_removed_on_sigterm() -> None:
    assert hold_then(signal.SIGTERM) == []


def test_killed_runs_are_cleaned_by_the_next() -> None:
    left = hold_then(signal.SIGKILL)
    assert len(left) == 2  # nothing runs a finally clause on SIGKILL
    assert set(left) <= set(netns.clean_stale())
    assert netns.leftovers() == []
