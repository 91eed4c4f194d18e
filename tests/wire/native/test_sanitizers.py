"""The sanitized run checks itself: its modules are the scratch build's, and a bug stops it.

These run only under ``.ci/lib/sanitize.sh`` (they skip elsewhere). A read
past a buffer's end and a signed overflow in the canary extension, built
with the same flags, must each end a child interpreter with the sanitizer's
report: were the flags or the preloaded runtime lost, the fuzz would pass
whatever the C readers do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .build import MODULES, SUFFIX, build_folder

BUILD = build_folder()


def test_the_c_modules_are_the_sanitized_build() -> None:
    import openenv_ws._expand
    import openenv_ws._wire

    assert BUILD is not None
    for module in (openenv_ws._wire, openenv_ws._expand):
        assert module.__name__ in MODULES
        assert Path(module.__file__ or "").parent == BUILD, module.__file__


def _canary(call: str) -> subprocess.CompletedProcess[str]:
    assert BUILD is not None
    script = (
        "import importlib.util, numpy\n"
        f"spec = importlib.util.spec_from_file_location('canary', {str(BUILD / ('canary' + SUFFIX))!r})\n"
        "canary = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(canary)\n"
        "data = numpy.arange(100, dtype=numpy.uint8)\n"
        f"print({call})\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, check=False
    )


def test_the_canary_works_within_bounds() -> None:
    done = _canary("canary.peek(data, 99), canary.add(2, 3)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["99", "5"]


def test_address_sanitizer_stops_a_read_past_the_end() -> None:
    done = _canary("canary.peek(data, 100)")
    assert done.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in done.stderr, done.stderr[-2000:]


def test_undefined_behavior_sanitizer_stops_a_signed_overflow() -> None:
    done = _canary("canary.add(2**31 - 1, 1)")
    assert done.returncode != 0
    assert "signed integer overflow" in done.stderr, done.stderr[-2000:]
