"""LocalServerProvider: a real ``openenv-ws serve`` subprocess that never outlives its owner."""

from __future__ import annotations

import contextlib
import gc
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from atari import AtariEnv
from openenv_ws import RemoteEnvError, ServerUnavailable
from openenv_ws.client import EnvClient
from openenv_ws.providers import LocalServerProvider
from openenv_ws.providers._base import read_output

from ..conftest import UNIT
from ._procs import alive, children, descendants, wait_dead

ROOT = Path(__file__).resolve().parents[2]
STUBBORN = ["--env", "tests.providers._stubborn:factory"]
# The test package must be importable by the server subprocesses.
CHILD_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

# A parent process that starts a provider and waits to be killed. Modes:
#   main       start from the main thread (PDEATHSIG armed, stdin watch on)
#   thread     start from a thread that ends at once (only the stdin watch)
#   pdeathsig  start from the main thread, then let another process hold the
#              server's stdin pipe so that only PDEATHSIG can tell it
PARENT = r"""
import subprocess, sys, threading
from openenv_ws.providers import LocalServerProvider
from openenv_ws.providers._base import read_output

mode, stop_timeout, *args = sys.argv[1:]
box = []

def start():
    box.append(LocalServerProvider(args=args, stop_timeout=float(stop_timeout)).start())

if mode == "thread":
    t = threading.Thread(target=start)
    t.start()
    t.join()
else:
    start()
provider = box[0]
holder = 0
if mode == "pdeathsig":
    fd = provider.process.stdin.fileno()
    quiet = subprocess.DEVNULL
    holder = subprocess.Popen(["sleep", "600"], pass_fds=[fd], stdout=quiet, stderr=quiet).pid
print(provider.pid, provider.port, holder, flush=True)
sys.stdin.read()
"""


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"the parent printed nothing within {timeout} s")
    line = proc.stdout.readline()
    assert line, f"the parent exited early: {proc.stderr.read() if proc.stderr else ''}"
    return line


def roundtrip(port: int) -> None:
    with EnvClient(f"ws://127.0.0.1:{port}", open_timeout=10 * UNIT, timeout=10 * UNIT) as env:
        assert env.reset(seed=1).observation is not None


def kill_quietly(pid: int) -> None:
    if pid and alive(pid):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("mode", "workers"), [("main", 1), ("thread", 1), ("pdeathsig", 1), ("main", 2)]
)
def test_a_killed_parent_takes_its_server_down(mode: str, workers: int) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode, "10", "--env", "fake", "--workers", str(workers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **CHILD_ENV},
    )
    server = holder = 0
    tree: set[int] = set()
    try:
        server, port, holder = map(int, read_line(parent, 60 * UNIT).split())
        roundtrip(port)  # alive, also after the thread that started it has ended
        tree = {server, *descendants(server)}
        assert len(tree) == (1 if workers == 1 else 1 + workers)  # a supervisor and its workers
        parent.kill()
        parent.wait(10 * UNIT)
        left = [pid for pid in tree if not wait_dead(pid)]
        assert not left, f"server processes {left} outlived their killed parent ({mode})"
    finally:
        parent.kill()
        parent.communicate()
        for pid in {*tree, server, holder}:
            kill_quietly(pid)


def test_a_server_ignoring_sigterm_is_killed_after_its_killed_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "main", str(0.5 * UNIT), *STUBBORN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **CHILD_ENV},
    )
    server = 0
    try:
        server, port, _ = map(int, read_line(parent, 60 * UNIT).split())
        with EnvClient(f"ws://127.0.0.1:{port}", timeout=10 * UNIT) as env:
            env.reset(seed=0)  # the session's factory made the server ignore SIGTERM
            parent.kill()
            parent.wait(10 * UNIT)
            assert wait_dead(server), "a server ignoring SIGTERM outlived its killed parent"
    finally:
        parent.kill()
        parent.communicate()
        kill_quietly(server)


def test_start_health_and_graceful_stop() -> None:
    with LocalServerProvider(args=["--env", "fake"]) as provider:
        assert provider.url.startswith("ws://127.0.0.1:") and provider.url.endswith("/ws")
        health = provider.health()
        assert health is not None and health["status"] == "ok" and health["pid"] == provider.pid
        pid = provider.pid
        assert pid is not None
        roundtrip(provider.port or 0)
    assert not alive(pid)
    # uvicorn drains, then re-raises the SIGTERM it caught: exit 0 or that signal, never SIGKILL.
    assert provider.returncode in (0, -signal.SIGTERM)
    assert provider.health() is None
    with pytest.raises(ServerUnavailable, match="not started"):
        _ = provider.url
    provider.stop()  # idempotent


def test_stop_kills_a_server_that_ignores_sigterm() -> None:
    provider = LocalServerProvider(args=STUBBORN, env=CHILD_ENV, stop_timeout=0.5 * UNIT).start()
    try:
        with EnvClient(provider.url, timeout=10 * UNIT) as env:
            env.reset(seed=0)
            provider.stop()
    finally:
        provider.stop()
    assert provider.returncode == -signal.SIGKILL


def test_a_caller_raising_inside_with_stops_the_server() -> None:
    pid = None
    with pytest.raises(ZeroDivisionError), LocalServerProvider(args=["--env", "fake"]) as provider:
        pid = provider.pid
        _ = 1 / 0
    assert pid is not None and wait_dead(pid, 5 * UNIT)


def test_a_failed_start_says_why_and_leaves_no_process() -> None:
    before = children()
    with pytest.raises(ServerUnavailable, match="exited with code") as info:
        LocalServerProvider(args=["--env", "no_such_module:factory"]).start()
    assert "cannot be loaded" in str(info.value)
    assert children() <= before


def test_a_refused_session_stops_the_embedded_server() -> None:
    before = children()
    with pytest.raises(RemoteEnvError, match="no_such_game"):
        AtariEnv(None, game="no_such_game")
    assert children() <= before


def test_atari_env_from_local_stops_its_server_on_close() -> None:
    before = children()
    with AtariEnv.from_local(game="pong", max_episode_steps=5) as env:
        started = children() - before
        assert len(started) == 1
        result = env.reset(seed=0)
        while not result.done:
            result = env.step(0)
        assert result.truncated
    assert all(wait_dead(pid, 15 * UNIT) for pid in started)


def test_a_forgotten_provider_stops_its_server_when_collected() -> None:
    provider = LocalServerProvider(args=["--env", "fake"]).start()
    pid = provider.pid
    assert pid is not None
    del provider
    gc.collect()
    assert wait_dead(pid, 15 * UNIT)


def test_a_server_started_by_a_finished_thread_keeps_running() -> None:
    import threading

    box: list[LocalServerProvider] = []
    thread = threading.Thread(
        target=lambda: box.append(LocalServerProvider(args=["--env", "fake"]).start())
    )
    thread.start()
    thread.join(60 * UNIT)
    with box[0] as provider:
        time.sleep(0.1 * UNIT)  # PDEATHSIG, had it been armed, would have fired by now
        assert provider.pid is not None and alive(provider.pid)
        roundtrip(provider.port or 0)


def test_reading_a_servers_output_never_costs_it_a_line(tmp_path: Path) -> None:
    """The child shares the log's offset: reads while it writes must leave every line whole."""
    lines = 3000
    writer = "import sys\nfor i in range(LINES):\n    sys.stdout.write(f'line {i:05d}\\n'); sys.stdout.flush()\n"
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(
            [sys.executable, "-c", writer.replace("LINES", str(lines))], stdout=log
        )
        reads = 0
        while child.poll() is None:
            read_output(log)
            reads += 1
        assert child.wait() == 0
        expected = "".join(f"line {i:05d}\n" for i in range(lines))
        assert read_output(log) == expected, f"after {reads} reads while the child wrote"


# A training loop run from a terminal: its own process group, as a shell's foreground job.
CTRL_C_LOOP = r"""
import signal, sys, time
from atari import AtariEnv

# As in a terminal, whatever the test's own parent ignores (a background job ignores SIGINT).
signal.signal(signal.SIGINT, signal.default_int_handler)

env = AtariEnv(game="pong")
print("server", env._provider.pid, flush=True)
result = env.reset(seed=0)
steps = 0
try:
    while True:
        result = env.step(0)
        steps += 1
        if steps == 20:
            print("stepping", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    time.sleep(float(sys.argv[1]))  # saving a checkpoint takes a while
    env.step(0)  # and the session is still there afterwards
    print("saved", flush=True)
env.close()
"""


def test_ctrl_c_interrupts_the_loop_and_spares_the_embedded_server() -> None:
    loop = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_LOOP, str(UNIT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server = 0
    try:
        _, pid = read_line(loop, 60 * UNIT).split()
        server = int(pid)
        assert read_line(loop, 60 * UNIT).strip() == "stepping"
        os.killpg(loop.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, err = loop.communicate(timeout=30 * UNIT)
        assert "interrupted\nsaved\n" in out, f"stdout: {out!r}\nstderr: {err[-2000:]}"
        assert loop.returncode == 0, err[-2000:]
        assert wait_dead(server), "the embedded server outlived the interrupted program"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(loop.pid, signal.SIGKILL)
        loop.communicate()
        kill_quietly(server)
