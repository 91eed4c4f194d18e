"""Entry point of a local provider's server: ``openenv-ws serve`` that ends with its parent.

Run as ``python -m openenv_ws.providers._child GRACE SERVE_ARGS...``. Standard
input is a pipe whose only writer is the parent process; the kernel closes it
when the parent exits in any way (even SIGKILL), so end-of-file on it means the
parent is gone. The server then gets SIGTERM (it drains and exits) and, if it
is still alive GRACE seconds later, SIGKILL.

This complements ``PR_SET_PDEATHSIG``: that signal is tied to the *thread*
that started the child, so it can only be armed when the main thread does, and
it cannot escalate to SIGKILL for a server that ignores SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__: list[str] = []


def _watch_parent(grace: float) -> None:
    try:
        while os.read(0, 4096):
            pass  # the parent never writes; anything read is ignored
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m openenv_ws.providers._child GRACE [serve args...]", file=sys.stderr)
        return 2
    grace = float(argv[0])
    threading.Thread(target=_watch_parent, args=(grace,), name="parent-watch", daemon=True).start()
    from ..cli import main as cli_main

    return cli_main(["serve", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
