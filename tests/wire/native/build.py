"""Where the sanitized build of the C extensions is, in a run of ``.ci/lib/sanitize.sh``."""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

BUILD_VARIABLE = "OPENENV_WS_NATIVE_BUILD"
MODULES = ("openenv_ws._wire", "openenv_ws._expand")
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def build_folder() -> Path | None:
    """The scratch build this run tests, or None in an ordinary run."""
    folder = os.environ.get(BUILD_VARIABLE)
    return Path(folder) if folder else None
