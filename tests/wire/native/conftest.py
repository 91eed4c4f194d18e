"""test_sanitizers.py checks the sanitized build itself: an ordinary run does not
collect it (rather than skipping it), and the sanitized run fails if it skips."""

from __future__ import annotations

from .build import build_folder

collect_ignore = [] if build_folder() is not None else ["test_sanitizers.py"]
