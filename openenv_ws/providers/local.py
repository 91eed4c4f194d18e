"""The embedded default: an ``openenv-ws serve`` subprocess on a free local port.

The server never outlives the process that started it:

- :meth:`LocalServerProvider.stop` (also on ``with`` exit, on an error while
  starting, on garbage collection and at interpreter exit) sends SIGTERM, so
  the server drains, and SIGKILL after ``stop_timeout``;
- if the parent dies without stopping it (even by SIGKILL), the server's
  stdin pipe reaches end-of-file and the server ends itself the same way
  (see :mod:`openenv_ws.providers._child`);
- on Linux, when started from the main thread, the kernel also sends it
  SIGTERM the moment the parent dies (``PR_SET_PDEATHSIG``).

The server runs in a session (and process group) of its own, so a Ctrl-C in
the terminal interrupts the user's code with ``KeyboardInterrupt`` while the
server keeps serving: ``except KeyboardInterrupt: save()`` can still step,
and the server stops when the provider does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from typing import IO, Any

from ..errors import ServerUnavailable
from ._base import OneServer, read_output

__all__ = ["LocalServerProvider"]

_READY = re.compile(r"serving protocol v\d+ on ws://(?P<host>[^:/\s]+|\[[^\]]+\]):(?P<port>\d+)/ws")


def _die_with_parent(parent_pid: int | None = None) -> None:  # pragma: no cover - in the child
    """``preexec_fn``: the child gets SIGTERM when the thread that forked it dies (Linux).

    With `parent_pid`, a parent that died before the signal was armed is noticed too.
    """
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


class LocalServerProvider(OneServer):
    """Start ``openenv-ws serve`` as a subprocess, wait until healthy, stop it on exit.

    The child binds port 0 (the OS picks a free port) and prints the port; no
    port is guessed, so parallel providers never collide. The child is stopped
    when the provider is closed, garbage collected, or the parent dies (see the
    module docstring); a child that ignores SIGTERM is killed after
    ``stop_timeout`` seconds.

    Args:
        host: address to bind (default 127.0.0.1).
        args: extra ``openenv-ws serve`` arguments (e.g. ``["--workers", "2"]``).
        startup_timeout: seconds to wait for the server to become healthy.
        stop_timeout: seconds to wait after SIGTERM before SIGKILL.
        env: extra environment variables for the child.
    """

    not_running = "the local server is not started; call start() first"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.env = env
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        #: The exit code of the last server this provider stopped (negative: killed by that signal).
        self.returncode: int | None = None
        self._log: IO[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _address(self) -> tuple[str, int] | None:
        return None if self.port is None else (self.host, self.port)

    def start(self) -> LocalServerProvider:
        """Start the server and wait until ``/health`` answers.

        Raises:
            ServerUnavailable: the server exited or did not become healthy in time
                (the message holds the tail of its output).
        """
        if self.process is not None:
            return self
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
        cmd = [
            sys.executable,
            "-m",
            "openenv_ws.providers._child",
            str(self.stop_timeout),
            "--host",
            self.host,
            "--port",
            "0",
            *self.args,
        ]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        # PR_SET_PDEATHSIG fires when the forking *thread* ends: armed from any
        # other thread it would kill the server while its owner still runs.
        arm = (
            sys.platform.startswith("linux")
            and threading.current_thread() is threading.main_thread()
        )
        try:
            self.process = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,  # its end-of-file tells the child that this process is gone
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                # A session of its own: the terminal's Ctrl-C (SIGINT to the foreground
                # process group) reaches the user's code, not the server under it.
                start_new_session=True,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()) if arm else None,
            )
        except BaseException:
            self._log.close()
            self._log = None
            raise
        self._finalizer = weakref.finalize(
            self, _terminate, self.process, self.stop_timeout, self._log
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _output(self) -> str:
        assert self._log is not None
        return read_output(self._log)

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerUnavailable(
                    f"the local server exited with code {self.process.returncode}:\n"
                    f"{self._output()[-2000:]}"
                )
            if self.port is None:
                match = _READY.search(self._output())
                if match:
                    self.port = int(match["port"])
            if self.port is not None and self.health(timeout=1.0) is not None:
                return
            time.sleep(0.02)
        raise ServerUnavailable(
            f"the local server did not become healthy within {self.startup_timeout} s:\n"
            f"{self._output()[-2000:]}"
        )

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self.process.pid if self.process is not None else None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``stop_timeout``). Idempotent."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        if self.process is not None:
            self.returncode = self.process.returncode
        self.process = None
        self.port = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServerProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(process: subprocess.Popen[bytes], timeout: float, log: IO[bytes]) -> None:
    try:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
    finally:
        # Even when interrupted (KeyboardInterrupt in wait), the server must not outlive us.
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdin is not None:
            process.stdin.close()
        log.close()
