"""A fake environment whose server ignores SIGTERM once a session opens (for stop tests)."""

from __future__ import annotations

import signal
from typing import Any

from openenv_ws.registry import EnvPlugin
from openenv_ws.testing import FakeEnvironment


def _build(config: dict[str, Any]) -> FakeEnvironment:
    # Sessions of this plugin open on the server's event loop, which `serve` runs
    # on the main thread, so this replaces uvicorn's own SIGTERM handler.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return FakeEnvironment(config)


factory = EnvPlugin(_build)
