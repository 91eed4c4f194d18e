"""Pytest plugin (``-p tests.wire.native.sanitized``): the C extensions of a scratch build.

``.ci/lib/sanitize.sh`` builds ``openenv_ws._wire`` and ``openenv_ws._expand``
with AddressSanitizer and UndefinedBehaviorSanitizer into the folder named by
``OPENENV_WS_NATIVE_BUILD`` and runs pytest with this plugin, which is loaded
before any conftest (the root one imports the package): from then on both
modules are imported from that folder, not from the source tree. The run
fails if either module came from elsewhere, or if it holds no test of
tests/wire/native/ or skips one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from .build import BUILD_VARIABLE, MODULES, SUFFIX, build_folder


class ScratchBuild(importlib.abc.MetaPathFinder):
    """Finds the extension modules in the scratch build before the package's own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        location = self.folder / (fullname.rpartition(".")[2] + SUFFIX)
        if not location.exists():
            raise ImportError(f"{location} is missing: the sanitized build did not make it")
        return importlib.util.spec_from_file_location(fullname, location)


def _install() -> None:
    # At import, not in pytest_configure: conftests (which import the package)
    # are loaded between the two.
    folder = build_folder()
    if folder is None:
        raise pytest.UsageError(
            f"-p tests.wire.native.sanitized needs {BUILD_VARIABLE} (sanitize.sh)"
        )
    loaded = [name for name in MODULES if name in sys.modules]
    if loaded:
        raise pytest.UsageError(f"{loaded} were imported before the sanitized build could be")
    sys.meta_path.insert(0, ScratchBuild(folder))


_install()


HERE = Path(__file__).parent
_skipped: list[str] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not any(HERE in Path(item.path).parents for item in items):
        raise pytest.UsageError("the sanitized run collected no test of tests/wire/native/")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A test of tests/wire/native/ that skips here (a C module that did not load, say)
    # would hide the very thing this run is for.
    if report.skipped and report.nodeid.startswith("tests/wire/native/"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and exitstatus == 0:
        print(
            f"\nthe sanitized run skipped tests of tests/wire/native/: {_skipped}", file=sys.stderr
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
