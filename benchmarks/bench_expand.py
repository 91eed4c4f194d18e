"""Colour codes expanded by the client against ALE's own RGB conversion, per frame.

A session with indexed frames (SPEC section 18) gets a screen's 210x160
colour codes and expands them itself; in-process, ALE converts them to RGB
(``getScreenRGB``). On frames of a played Pong episode, in one process,
this times per frame:

- ``ALE getScreenRGB`` (the reference): ALE's conversion into a new array;
- ``ALE getScreen``: the codes alone, what the server fetches instead;
- ``expand, <kernel>``: the client's C expansion into a new array with the
  kernel chosen for this CPU (``openenv_ws._expand.KERNEL``);
- ``expand, portable``: the same with the portable C loop;
- ``expand, numpy``: the fallback without a C compiler.

Each row is the median over rounds of the mean per frame, and its ratio to
the reference.

    python benchmarks/bench_expand.py [--frames 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from atari.palettes import palette_of
from benchmarks.measure import raw_ale
from openenv_ws import _palette


def _per_frame(fn: Callable[[int], Any], frames: int, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        for i in range(frames):
            fn(i)
    return (time.perf_counter() - start) / (frames * repeats) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    ale, rom = raw_ale("pong")
    ale.loadROM(rom)
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)
    codes = []
    for _ in range(args.frames):  # frames along a played episode, one per step of 4
        for _ in range(4):
            ale.act(actions[int(rng.integers(len(actions)))])
        if ale.game_over():
            ale.reset_game()
        codes.append(ale.getScreen())
    palette = palette_of("pong")
    assert palette is not None
    shape = (*codes[0].shape, 3)

    def expand_with(kernel: Callable[[Any, bytes, Any], None]) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            out = np.empty(shape, np.uint8)
            kernel(codes[i], palette, out)
            return out

        return run

    contenders: dict[str, Callable[[int], Any]] = {
        "ALE getScreenRGB": lambda i: ale.getScreenRGB(),
        "ALE getScreen": lambda i: ale.getScreen(),
    }
    if _palette.NATIVE:
        from openenv_ws._expand import KERNEL
        from openenv_ws._expand import expand as native

        contenders[f"expand, {KERNEL}"] = expand_with(native)
        contenders["expand, portable"] = expand_with(lambda s, p, o: native(s, p, o, True))
    contenders["expand, numpy"] = expand_with(_palette._numpy_expand)

    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            repeats = 1 if name.endswith("numpy") else args.repeats
            times[name].append(_per_frame(fn, args.frames, repeats))
    reference = statistics.median(times["ALE getScreenRGB"])
    print(f"game=pong frames={args.frames} rounds={args.rounds}; µs per 210x160 frame")
    print(f"{'contender':26} {'µs':>8} {'vs getScreenRGB':>16}")
    for name, samples in times.items():
        us = statistics.median(samples)
        print(f"{name:26} {us:8.2f} {us / reference:15.2f}x")


if __name__ == "__main__":
    main()
