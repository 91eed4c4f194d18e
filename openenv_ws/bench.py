"""``openenv-ws bench``: runs the benchmark suite of the top-level ``benchmarks`` package.

The suite is a package of the distribution (``pip install -e '.[bench]'`` also
installs its plotting, progress and peer dependencies); the runtime imports it
only here, when the command runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from types import ModuleType

__all__ = ["main"]


def _runner() -> ModuleType:
    try:
        return importlib.import_module("benchmarks.runner")
    except ModuleNotFoundError as exc:
        if exc.name in ("benchmarks", "benchmarks.runner"):
            raise SystemExit(
                "the benchmark suite (the 'benchmarks' package) is not installed: "
                "pip install -e '.[bench]' in a clone of openenv-ws"
            ) from None
        raise SystemExit(
            f"the benchmark suite needs {exc.name!r}: pip install 'openenv-ws[bench]' "
            "(or pip install -e '.[bench]' in a clone)"
        ) from None


def main(argv: Sequence[str]) -> int:
    """Run ``openenv-ws bench ARGV`` and return its exit code."""
    code: int = _runner().main(list(argv), prog="openenv-ws bench")
    return code
