"""An environment whose constructor waits for a file: builds off the event loop.

Served as ``--env tests.server.hostile._gated:factory`` (a module:factory, so its
builds run on the opening session's worker thread). Config: the fake
environment's options, plus

- ``gate``: a file path; the constructor waits until the file exists;
- ``fail``: true to refuse the config from the constructor (``bad_config``);
- ``closed``: a file path written when the environment is closed;
- ``step_gate``: a file path; every step waits until the file exists (a call
  that runs past the server's deadline);
- ``raise_text``: every step raises a ``ValueError`` with this message (an
  unexpected failure quoting what the client sent).

The server builds at most ``MAX_BUILDS_OFF_LOOP`` environments at once: a
constructor that finds that many others running raises, and the open that
started it fails.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from openenv_ws.errors import EnvConfigError
from openenv_ws.server.session.pacing import MAX_BUILDS_OFF_LOOP
from openenv_ws.testing import FakeEnvironment

_lock = threading.Lock()
_building = 0


class GatedEnvironment(FakeEnvironment):
    def __init__(self, config: Mapping[str, Any]) -> None:
        global _building
        rest = dict(config)
        gate = rest.pop("gate", None)
        fail = rest.pop("fail", False)
        self._closed_mark = rest.pop("closed", None)
        self._step_gate = rest.pop("step_gate", None)
        self._raise_text = rest.pop("raise_text", None)
        with _lock:
            _building += 1
            overlapping = _building > MAX_BUILDS_OFF_LOOP
        try:
            if overlapping:
                raise RuntimeError(f"{_building} environments were being built at once")
            while gate is not None and not os.path.exists(gate):
                time.sleep(0.005)
            if fail:
                raise EnvConfigError("this environment refuses its config ('fail': true)")
            super().__init__(rest)
            if self._step_gate is not None:
                self.inline = False  # its steps may never return: the session's thread
        finally:
            with _lock:
                _building -= 1

    def step(self, action: Any, *, obs: bool = True) -> Any:
        while self._step_gate is not None and not os.path.exists(self._step_gate):
            time.sleep(0.005)
        if self._raise_text is not None:
            raise ValueError(self._raise_text)
        return super().step(action, obs=obs)

    def close(self) -> None:
        if self._closed_mark is not None:
            with open(self._closed_mark, "w"):
                pass
        super().close()


def factory(config: dict[str, Any]) -> GatedEnvironment:
    return GatedEnvironment(config)
