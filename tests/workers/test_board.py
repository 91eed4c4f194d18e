"""WorkerBoard: per-worker counters in shared memory, summed by whichever worker reads."""

from __future__ import annotations

import os

from openenv_ws.server.workers import WorkerBoard


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
