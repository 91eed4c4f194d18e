"""Colour codes expanded by the client against ALE's own RGB conversion, per frame.

A session with indexed frames (SPEC section 18) gets a screen's 210x160
colour codes and expands them itself; in-process, ALE converts them to RGB
(``getScreenRGB``). On frames of a played episode (``--steps``/10 of them, at least 10), in one process,
this times per frame:

- ``ALE getScreenRGB`` (the reference): ALE's conversion into a new array;
- ``ALE getScreen``: the codes alone, what the server fetches instead;
- ``expand, <kernel>``: the client's C expansion into a new array with the
  kernel chosen for this CPU (``openenv_ws._expand.KERNEL``);
- ``expand, portable``: the same with the portable C loop;
- ``expand, numpy``: the fallback without a C compiler.

Each row is the median over rounds of the mean per frame, and its ratio to
the reference.

"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..measure import raw_ale
from ..suite import Column, Context, Section, scenario

__all__: list[str] = []

#: Passes over the frames per round (the numpy fallback, far slower, makes one).
REPEATS = 20
COLUMNS = [
    Column("path", "contender"),
    Column("us", "µs per frame", ".2f"),
    Column("vs_reference", "vs getScreenRGB", ".2f"),
]


def _per_frame(fn: Callable[[int], Any], frames: int, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        for i in range(frames):
            fn(i)
    return (time.perf_counter() - start) / (frames * repeats) * 1e6


@scenario("expand", "Colour expansion vs ALE's RGB conversion", default=False)
def run(ctx: Context) -> Section:
    """The client's colour-code expansion (C kernels, numpy) vs ALE's own getScreenRGB."""
    from atari.palettes import palette_of
    from openenv_ws import palette as palette_mod

    game = ctx.options.games[0]
    frames, rounds = max(10, ctx.options.steps // 10), max(1, ctx.options.rounds)
    section = Section("expand", "Colour expansion vs ALE's RGB conversion", COLUMNS)
    ctx.progress.start(section.title, rounds)
    ale, rom = raw_ale(game)
    ale.loadROM(rom)
    actions = ale.getMinimalActionSet()
    rng = np.random.default_rng(0)
    codes = []
    for _ in range(frames):  # frames along a played episode, one per step of 4
        for _ in range(4):
            ale.act(actions[int(rng.integers(len(actions)))])
        if ale.game_over():
            ale.reset_game()
        codes.append(ale.getScreen())
    palette = palette_of(game)
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
    if palette_mod.NATIVE:
        from openenv_ws._expand import KERNEL
        from openenv_ws._expand import expand as native

        contenders[f"expand, {KERNEL}"] = expand_with(native)
        contenders["expand, portable"] = expand_with(lambda s, p, o: native(s, p, o, True))
    contenders["expand, numpy"] = expand_with(palette_mod._numpy_expand)

    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        ctx.progress.phase(f"round {r + 1}")
        for name, fn in contenders.items():
            repeats = 1 if name.endswith("numpy") else REPEATS
            times[name].append(_per_frame(fn, frames, repeats))
    reference = statistics.median(times["ALE getScreenRGB"])
    for name, samples in times.items():
        us = statistics.median(samples)
        section.add(path=name, us=us, vs_reference=us / reference)
    section.notes.append(
        f"{game}, {frames} frames of a played episode, median of {rounds} rounds; µs per "
        f"{codes[0].shape[0]}x{codes[0].shape[1]} frame, into a new array."
    )
    return section
