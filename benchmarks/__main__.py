"""``python -m benchmarks``: the same as ``openenv-ws bench``."""

from __future__ import annotations

import sys

from .runner import main

sys.exit(main(prog="python -m benchmarks"))
