"""What writing RGB frames into shared regions costs the emulator, against a fresh array.

In-process, ``AtariEnvironment.step`` has ALE write each frame into a new
array, which the allocator hands back from the block the previous frame
just freed: memory already in the core's cache. A server writes each
session's frame into that session's shared region (SPEC section 17), two
halves per region, and the client copies it out on another core. So with
16 sessions the emulator writes into 32 places in turn, each last touched
by the other core.

This script times ``getScreenRGB`` alone (the emulator's palette conversion
of one 210x160 frame) in one process pinned to one core, after four
``act`` calls as a step makes them, for:

- ``fresh array``: a new array per frame, as in-process;
- ``regions, no reader``: the server side of `sessions` real regions
  (``ServerRegion.reserve``), nobody reading them;
- ``regions, read on core 1``: the same, each frame copied out by a
  ``ClientRegion.read`` in a second process pinned to the other core before
  the next step (the client's side of a pipelined vector client);
- ``codes, read on core 1``: what a server does for a client that asked for
  indexed frames (SPEC section 18): ``getScreen``, the 210x160 colour codes
  (a third of the bytes, no palette conversion), into the same regions, read
  on core 1 likewise.

Contenders alternate by round; each row gives the median over rounds of the
mean per frame and its ratio to the fresh array.

    python benchmarks/bench_frame_cache.py [--sessions 1 4 16] [--steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.measure import raw_ale
from openenv_ws._shm import ClientRegion, ServerRegion, shared_memory_supported

SERVER_CORE, CLIENT_CORE = 0, 1
SHAPE = (210, 160, 3)
CODES = SHAPE[:2]


def _reader(regions: list[ClientRegion], requests: int, replies: int) -> None:
    """The client's side, in a child process: copy out every frame it is told about."""
    os.sched_setaffinity(0, {CLIENT_CORE})
    with os.fdopen(requests, "rb", buffering=0) as inbox, os.fdopen(replies, "wb", 0) as outbox:
        while True:
            head = inbox.read(2)
            if len(head) < 2:
                os._exit(0)
            size = head[1]
            payload = inbox.read(size)
            regions[head[0]].read(payload)
            outbox.write(b"k")


def _emulator(game: str) -> Any:
    ale, rom = raw_ale(game)
    ale.setInt("random_seed", 0)
    ale.loadROM(rom)
    ale.reset_game()
    return ale


def measure(game: str, sessions: int, steps: int, rounds: int) -> dict[str, float]:
    """µs per getScreenRGB for each contender (median over rounds)."""
    clients = [ClientRegion() for _ in range(sessions)]
    servers = [ServerRegion.attach(c.offer()) for c in clients]
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the reader process
        os.close(requests_w)
        os.close(replies_r)
        _reader(clients, requests_r, replies_w)
    os.close(requests_r)
    os.close(replies_w)
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {SERVER_CORE})
    ale = _emulator(game)
    actions = ale.getMinimalActionSet()
    pick = np.random.default_rng(0).integers(0, len(actions), steps).tolist()
    dtype = np.dtype(np.uint8)
    rgb_layout, codes_layout = (SHAPE, dtype), (CODES, dtype)

    def run(kind: str) -> float:
        total = 0.0
        for i, a in enumerate(pick):
            if ale.game_over():
                ale.reset_game()
            for _ in range(4):
                ale.act(actions[a])
            s = i % sessions
            layout = codes_layout if kind == "codes" else rgb_layout
            slot = None if kind == "fresh" else servers[s].reserve(layout)
            out: Any = np.empty(SHAPE, dtype) if slot is None else slot.view
            start = time.perf_counter()
            if kind == "codes":
                ale.getScreen(out)
            else:
                ale.getScreenRGB(out)
            total += time.perf_counter() - start
            if kind in ("read", "codes"):
                assert slot is not None
                payload = slot.name.ext_payload()
                os.write(requests_w, bytes((s, len(payload))) + payload)
                os.read(replies_r, 1)
        return total / steps * 1e6

    kinds = ("fresh", "regions", "read", "codes")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        for _ in range(rounds):
            for kind in kinds:
                times[kind].append(run(kind))
    finally:
        os.sched_setaffinity(0, mask)
        os.close(requests_w)
        os.waitpid(child, 0)
        os.close(replies_r)
        for server in servers:
            server.close()
        for client in clients:
            client.close()
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="pong")
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not shared_memory_supported():
        raise SystemExit("shared regions need Linux memfds")
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("this measurement needs two cores")
    print(
        f"game={args.game} steps={args.steps} rounds={args.rounds}; getScreenRGB per frame "
        "(getScreen for codes)"
    )
    print(
        f"{'sessions':>8}  {'fresh array':>11}  {'regions, no reader':>18}  "
        f"{'regions, read on core 1':>23}  {'codes, read on core 1':>21}"
    )
    for n in args.sessions:
        t = measure(args.game, n, args.steps, args.rounds)
        fresh = t["fresh"]
        print(
            f"{n:>8}  {fresh:>8.1f} us  {t['regions']:>7.1f} us ({t['regions'] / fresh:.2f}x)  "
            f"{t['read']:>12.1f} us ({t['read'] / fresh:.2f}x)  "
            f"{t['codes']:>10.1f} us ({t['codes'] / fresh:.2f}x)"
        )


if __name__ == "__main__":
    main()
