"""``openenv-ws bench``: runs the benchmark suite of the top-level ``benchmarks`` package.

The suite ships with the distribution (``pip install -e '.[bench]'`` also
installs its plotting, progress and peer dependencies). Run from a source
checkout without an install of the package, it is found next to this package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["main"]


def _runner() -> ModuleType:
    try:
        return importlib.import_module("benchmarks.runner")
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.runner"):
            raise SystemExit(
                f"the benchmark suite needs {exc.name!r}: pip install 'openenv-ws[bench]' "
                "(or pip install -e '.[bench]' in a clone)"
            ) from None
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / "benchmarks" / "runner.py").is_file():
        raise SystemExit(
            "the benchmark suite (the 'benchmarks' package) is not installed; "
            "run from a clone of openenv-ws after pip install -e '.[bench]'"
        )
    sys.path.insert(0, str(checkout))
    sys.modules.pop("benchmarks", None)
    return importlib.import_module("benchmarks.runner")


def main(argv: Sequence[str]) -> int:
    """Run ``openenv-ws bench ARGV`` and return its exit code."""
    code: int = _runner().main(list(argv), prog="openenv-ws bench")
    return code
