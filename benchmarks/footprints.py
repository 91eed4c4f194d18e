"""Resident memory of Atari sessions, per config: the calibration of ``atari/footprint.py``.

Run: ``python -m benchmarks.footprints``. Builds N environments of each
config in this process, resets each and steps it a few times, and prints the
growth of resident memory per environment next to what the server charges
it (``atari_footprint``), and their ratio (charged / measured; above 1 is
the safe side).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import psutil

from atari.environment import AtariEnvironment
from atari.footprint import atari_footprint
from atari.plugin import atari_vector

GRAY_84 = {"obs_type": "grayscale", "img_height": 84, "img_width": 84, "stack_num": 4}
GRAY_1024 = {"obs_type": "grayscale", "img_height": 1024, "img_width": 1024, "stack_num": 16}
RGB_512 = {"obs_type": "rgb", "img_height": 512, "img_width": 512, "stack_num": 16}

#: (name, config, num_envs (None: single sessions), batch_size, how many to build)
CASES: list[tuple[str, dict[str, Any], int | None, int | None, int]] = [
    ("single, rgb 210x160", {}, None, None, 20),
    ("single, gray 84x84 stack 4", GRAY_84, None, None, 20),
    ("single, gray 1024x1024 stack 16", GRAY_1024, None, None, 3),
    ("single, rgb 512x512 stack 16", RGB_512, None, None, 2),
    ("vector 8, rgb 210x160", {}, 8, 8, 1),
    ("vector 8 (batch 4), rgb 210x160", {}, 8, 4, 1),
    ("vector 16, gray 84x84 stack 4", GRAY_84, 16, 16, 1),
    ("vector 4, gray 1024x1024 stack 16", GRAY_1024, 4, 4, 1),
]


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def measure(make: Callable[[], Any], count: int, vector: bool) -> int:
    """Resident bytes each of `count` environments adds after a reset and a few steps."""
    before = _rss()
    envs = []
    for i in range(count):
        env = make()
        env.reset(seed=i)
        if not vector:
            for _ in range(5):
                env.step(0)
        envs.append(env)
    grown = _rss() - before
    for env in envs:
        env.close()
    return grown // count


def main() -> None:
    print(f"{'config':<36} {'measured':>12} {'charged':>12} {'ratio':>7}")
    for name, config, num_envs, batch, count in CASES:
        charged = atari_footprint(config, num_envs, batch).bytes
        if num_envs is None:
            grown = measure(lambda c=config: AtariEnvironment(c), count, vector=False)
        else:
            grown = measure(
                lambda c=config, n=num_envs, b=batch: atari_vector(dict(c), n, b),
                count,
                vector=True,
            )
        print(
            f"{name:<36} {grown / 1e6:>9.2f} MB {charged / 1e6:>9.2f} MB {charged / grown:>6.2f}x"
        )


if __name__ == "__main__":
    main()
