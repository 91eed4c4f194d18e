"""WorkerBoard: per-worker counters in shared memory, summed by whichever worker reads."""

from __future__ import annotations

import os

import pytest

from openenv_ws.server.runtime.workers import WorkerBoard


def test_board_slots_are_shared_and_summed() -> None:
    board = WorkerBoard(3)
    board.publish(5, 9)  # not a worker yet: ignored
    assert board.health()["sessions_total"] == 0
    pid = os.fork()
    if pid == 0:  # a worker writes its slot from another process
        board.index = 2
        board.publish(4, 7)
        os._exit(0)
    os.waitpid(pid, 0)
    board.index = 0
    board.publish(1, 1)
    health = board.health()
    assert [w["sessions"] for w in health["workers"]] == [1, 0, 4]
    assert (health["worker"], health["sessions_total"], health["opened_total_all"]) == (0, 5, 8)
    assert health["workers"][2]["pid"] == pid
    board.clear(2)
    assert board.health()["sessions_total"] == 1


def test_metrics_snapshots_are_read_by_the_other_workers() -> None:
    board = WorkerBoard(3)
    board.publish_metrics({"counters": {"replayed": 9}})  # not a worker yet: ignored
    assert board.other_metrics() == []
    pid = os.fork()
    if pid == 0:  # worker 1 publishes twice from its own process; the last one counts
        board.index = 1
        board.publish_metrics({"counters": {"replayed": 1}})
        board.publish_metrics({"counters": {"replayed": 2}, "step_counts": [1, 2, 3]})
        os._exit(0)
    os.waitpid(pid, 0)
    board.index = 0
    board.publish_metrics({"counters": {"replayed": 100}})  # its own: not among the others
    assert board.other_metrics() == [{"counters": {"replayed": 2}, "step_counts": [1, 2, 3]}]
    board.index = 2
    assert board.other_metrics() == [
        {"counters": {"replayed": 100}},
        {"counters": {"replayed": 2}, "step_counts": [1, 2, 3]},
    ]
    board.clear(1)  # a dead worker's snapshot goes with it
    assert board.other_metrics() == [{"counters": {"replayed": 100}}]
    with pytest.raises(ValueError, match="does not fit"):
        board.publish_metrics({"blob": b"x" * (20 << 10)})
