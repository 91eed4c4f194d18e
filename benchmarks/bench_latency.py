"""Single-session step latency: in-process ALE vs openenv-ws over a real WebSocket.

A shortcut to the suite's ``latency`` scenario (``openenv-ws bench --scenarios
latency``): both sides play the same game with the same options, seed and
actions, and the report gives p50/p90/p99/max, steps/s and the ratio.

    python benchmarks/bench_latency.py --steps 5000 --obs-types rgb --placement split,shared

Every ``openenv-ws bench`` option is accepted (``--help`` lists them); the
report goes to ``benchmarks/results/latency`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.runner import main

    args = sys.argv[1:]
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args = ["--out", "benchmarks/results/latency", *args]
    sys.exit(main(["--scenarios", "latency", *args], prog="bench_latency.py"))
