"""What ALE keeps in its serialized state, read and rebuilt without the emulator's help.

- :class:`PostLoadState`: the state a ROM load leaves, for any seed, without
  loading again (a load costs about 0.1 s with the GIL held).
- :class:`RepeatTracker`: the action ALE would repeat next under sticky
  actions, which ALE does not save; snapshots record it.
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

import ale_py
import numpy as np

__all__ = ["CLOCK_SEED", "PostLoadState", "RepeatTracker"]

# Environment random generator text inside a serialized ALEState: std::mt19937's
# 624 state words and its position, after a 4-byte little-endian length.
_MT19937_TEXT = re.compile(rb"((?:[0-9]+ ){624})([0-9]+)")
_DRAW_SCALE = float(1 << 32)


def _mt19937_state(serialized: bytes) -> tuple[np.ndarray[Any, Any], int] | None:
    matches = list(_MT19937_TEXT.finditer(serialized))
    if not matches:
        return None
    found = matches[-1]  # the environment's generator is saved after the system's
    start, text = found.start(), found.group(0)
    if serialized[start - 4 : start] != len(text).to_bytes(4, "little"):
        return None
    return np.array(found.group(1).split(), dtype=np.uint32), int(found.group(2))


# ALEState.serialize(): six 4-byte ints (paddles, frame numbers, mode, difficulty),
# the emulator's state as a length-prefixed string, then two ints (paddle limits).
_OUTER_INTS = 24
_U32 = struct.Struct("<I")
# ALE reads a random_seed of -1 (this unsigned seed, signed) as "seed from the clock".
CLOCK_SEED = (1 << 32) - 1


class PostLoadState:
    """The state ``loadROM`` leaves, for any seed, without loading again.

    ``random_seed`` only seeds the environment generator (std::mt19937, the one
    sticky actions draw from); the system generator has a fixed seed of its
    own. Until a load first draws from the environment generator it runs the
    same for every seed, so a load that draws nothing sets up the same state
    for every seed but for that generator, whose text is the last field of the
    serialized state: a load with seed ``s`` leaves this state with the text of
    a freshly seeded mt19937 in its place. ``reset_game`` resets the system and
    starts the episode as after a real load.

    :meth:`capture` checks that its load drew nothing (true of all bundled
    games but those whose ROM settings press buttons while loading, such as
    Berzerk): the captured generator must be the freshly seeded one.
    """

    __slots__ = ("_generator", "_head", "_inner", "_tail")

    def __init__(self, head: bytes, inner: bytes, tail: bytes) -> None:
        self._head, self._inner, self._tail = head, inner, tail
        # Re-seeding one RandomState costs a quarter of making one.
        self._generator = np.random.RandomState()

    @classmethod
    def capture(cls, ale: ale_py.ALEInterface, ale_seed: int) -> PostLoadState | None:
        """Split the state of a load seeded with ``ale_seed``; None for an unknown layout."""
        serialized = ale.cloneState(include_rng=True).serialize()
        matches = list(_MT19937_TEXT.finditer(serialized))
        inner_start = _OUTER_INTS + _U32.size
        if not matches or matches[-1].start() - _U32.size < inner_start:
            return None
        start, end = matches[-1].span()
        if _U32.unpack_from(serialized, _OUTER_INTS)[0] != end - inner_start:
            return None  # the generator is not the emulator state's last field
        post_load = cls(
            serialized[:_OUTER_INTS], serialized[inner_start : start - _U32.size], serialized[end:]
        )
        # Rebuilt with the load's own seed it must give back ALE's exact bytes: this
        # checks the layout and that numpy's legacy seeding is std::mt19937's.
        return post_load if post_load.serialized(ale_seed) == serialized else None

    def serialized(self, ale_seed: int) -> bytes:
        """The serialized state a load with ``random_seed`` ``ale_seed`` leaves."""
        # RandomState seeds an integer the legacy way, std::mt19937's seed(value).
        self._generator.seed(ale_seed)
        state = self._generator.get_state(legacy=False)
        key, pos = state["state"]["key"], state["state"]["pos"]
        text = f"{' '.join(map(str, key.tolist()))} {pos}".encode()
        inner_len = len(self._inner) + _U32.size + len(text)
        return b"".join(
            (self._head, _U32.pack(inner_len), self._inner, _U32.pack(len(text)), text, self._tail)
        )

    def state(self, ale_seed: int) -> ale_py.ALEState:
        """:meth:`serialized` as a state to restore."""
        return ale_py.ALEState(self.serialized(ale_seed))


class RepeatTracker:
    """Which action ALE would repeat next: its sticky-action candidate.

    Each frame, ALE draws two numbers from its environment generator (players
    A and B) and takes player A's new action only when the first draw is at
    least the repeat probability; otherwise it repeats its candidate, which it
    does not save in its state. From an anchor (a state whose candidate is
    known) and the actions sent since, the tracker replays those draws with
    numpy's MT19937 (the same generator) and checks that it ends where the
    emulator's generator is, so a replay it cannot confirm is never trusted.
    """

    __slots__ = (
        "_anchor",
        "_anchor_action",
        "_fixed_frames",
        "_p",
        "actions",
        "frames",
        "priming_frames",
    )

    def __init__(self, repeat_probability: float, fixed_frames: range | None) -> None:
        self._p = repeat_probability
        self._fixed_frames = None if fixed_frames is None else len(fixed_frames)
        self._anchor: ale_py.ALEState | None = None
        self._anchor_action: Any = ale_py.Action.NOOP
        self.actions: list[Any] = []
        self.frames: list[int] = []  # frames per step, only for a stochastic frameskip
        # With p = 0 the candidate never matters and with p = 1 it never changes
        # (ALE's reset sets NOOP), so only 0 < p < 1 needs tracking and priming.
        # Priming acts until all frames repeating has probability below 1e-12.
        sticky = 0.0 < repeat_probability < 1.0
        self.priming_frames = (
            min(4096, math.ceil(math.log(1e-12) / math.log(repeat_probability))) if sticky else 0
        )

    def start(self, source: ale_py.ALEInterface | ale_py.ALEState, action: Any) -> None:
        """Anchor at the current state of `source`, whose candidate is `action`."""
        # Cleared in place: the environment holds these lists' bound append methods.
        self.actions.clear()
        self.frames.clear()
        self._anchor_action = action
        if self.priming_frames:
            self._anchor = (
                source.cloneState(include_rng=True)
                if isinstance(source, ale_py.ALEInterface)
                else source
            )

    def guess(self) -> Any:
        """The candidate if at least one frame of the last step did not repeat."""
        return self.actions[-1] if self.actions else self._anchor_action

    def candidate(self, serialized_now: bytes) -> Any | None:
        """The exact candidate, or None if the draws cannot be replayed and confirmed."""
        if not self.priming_frames or not self.actions:
            return self._anchor_action
        assert self._anchor is not None
        start, now = _mt19937_state(self._anchor.serialize()), _mt19937_state(serialized_now)
        if start is None or now is None:
            return None
        steps = len(self.actions)
        if self._fixed_frames is not None:
            frames = np.full(steps, self._fixed_frames)
        else:
            frames = np.array(self.frames)
        generator = np.random.MT19937()
        generator.state = {"bit_generator": "MT19937", "state": {"key": start[0], "pos": start[1]}}
        draws = generator.random_raw(2 * int(frames.sum()))
        replayed = generator.state["state"]
        if replayed["pos"] != now[1] or not np.array_equal(replayed["key"], now[0]):
            return None
        taken = np.flatnonzero(draws[0::2] / _DRAW_SCALE >= self._p)
        if taken.size == 0:
            return self._anchor_action
        step_of_frame = np.repeat(np.arange(steps), frames)
        return self.actions[int(step_of_frame[taken[-1]])]
