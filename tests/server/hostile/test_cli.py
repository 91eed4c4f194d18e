"""The command line as a new user meets it: bad flags, busy ports, wrong URLs, the README.

Every test runs the real ``openenv-ws`` command (or a real server) in a
subprocess. A mistake gets one line saying what is wrong and a non-zero
exit, never a traceback or a server that restarts its workers forever.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

import openenv_ws
from openenv_ws import AuthError, ServerUnavailable
from openenv_ws.client import EnvClient

from ..._rawwire import exchange, upgrade_bytes
from .conftest import UNIT, hostile_server

ROOT = Path(__file__).resolve().parents[3]


def run(*argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a process group of its own; a run past `timeout` units fails the test
    (the group, workers included, is killed)."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout * UNIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"{shlex.join(argv)} still ran after {timeout * UNIT:g} s; it printed:\n"
            f"{(out + err)[-3000:]}"
        ) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return run(sys.executable, "-m", "openenv_ws", *args, timeout=timeout)


def assert_one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    err = done.stderr
    assert done.returncode == code, f"exit {done.returncode}, stderr:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    for word in words:
        assert word in err, f"{word!r} not in:\n{err}"


# ---------------------------------------------------------------------------- warm configs


@pytest.mark.parametrize(
    ("flag", "workers"), [("--pool-warm", "1"), ("--pool-warm", "2"), ("--openenv-config", "2")]
)
def test_a_config_the_environment_refuses_ends_serve_with_one_line(flag: str, workers: str) -> None:
    done = cli("serve", "--port", "0", "--workers", workers, flag, '{"game": "pongg"}')
    assert_one_line_error(done, 1, flag, "unknown game 'pongg'", "'pong'")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


WORKERS_FAILING_AT_START = textwrap.dedent(
    """
    import logging, sys
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    from openenv_ws.server.runtime.workers import WorkerBoard, reserve_port, run_workers

    def serve(sock, index):
        raise RuntimeError("this worker cannot build its app")

    port = reserve_port("127.0.0.1", 0).getsockname()[1]
    sys.exit(run_workers(2, serve, host="127.0.0.1", port=port, board=WorkerBoard(2)))
    """
)


def test_a_worker_that_fails_before_serving_ends_the_server_instead_of_restarting() -> None:
    done = run(sys.executable, "-c", WORKERS_FAILING_AT_START, timeout=30.0)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "before it started serving; stopping the server" in done.stderr, done.stderr[-3000:]
    assert "restarting" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("cannot build its app") <= 2  # once per worker at most


WORKER_CRASHING_AFTER_START = textwrap.dedent(
    """
    import logging, os, sys
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    from openenv_ws.server.runtime.workers import WorkerBoard, reserve_port, run_workers

    board = WorkerBoard(2)

    def serve(sock, index):
        board.publish_metrics({})  # it started serving, as an app's startup says
        if index == 1:
            os._exit(3)  # then crashes, every time
        while True:
            sock.accept()[0].close()

    port = reserve_port("127.0.0.1", 0).getsockname()[1]
    sys.exit(run_workers(2, serve, host="127.0.0.1", port=port, board=board))
    """
)


def test_a_worker_that_keeps_crashing_after_it_started_ends_the_server() -> None:
    done = run(sys.executable, "-c", WORKER_CRASHING_AFTER_START, timeout=60.0)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "worker 1" in done.stderr and "died 5 times within 60 s" in done.stderr, done.stderr
    assert done.stderr.count("restarting it") == 4, done.stderr  # restarted until then


# ---------------------------------------------------------------------------- the port


@pytest.fixture
def taken_port() -> int:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_and_exit_1(taken_port: int, workers: str) -> None:
    done = cli("serve", "--env", "fake", "--port", str(taken_port), "--workers", workers)
    assert_one_line_error(done, 1, f"127.0.0.1:{taken_port}", "in use", "--port")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("port", ["70000", "-1", "eighty"])
def test_a_port_out_of_range_is_a_usage_error(port: str) -> None:
    done = cli("serve", "--env", "fake", "--port", port)
    assert_one_line_error(done, 2, "--port", "65535")
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr  # usage line + error


# ---------------------------------------------------------------------------- help and version


def help_entries(text: str) -> dict[str, str]:
    """Each option of a ``--help`` text and its description (whitespace collapsed)."""
    entries = {}
    for block in re.split(r"\n  (?=-)", text.split("options:", 1)[1]):
        flags = re.findall(r"--[a-z0-9-]+", block.split("  ", 1)[0])
        if flags:
            entries[flags[0]] = " ".join(block.split())
    return entries


def options_with_values(command: str) -> dict[str, object]:
    """``--flag``: default, for every option of `command` that takes a value and has one."""
    from openenv_ws.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]  # type: ignore[attr-defined]
    return {
        action.option_strings[-1]: action.default
        for action in sub._actions
        if action.option_strings and action.nargs != 0 and action.default not in (None, [])
    }


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_help_gives_the_default_of_every_option(command: str) -> None:
    done = cli(command, "--help")
    assert done.returncode == 0, done.stderr
    entries = help_entries(done.stdout)
    for flag in options_with_values(command):
        assert flag in entries, f"{flag} is missing from {command} --help"
        assert "default" in entries[flag], f"{command} --help does not give {flag}'s default"
    if command == "serve":
        assert "(default: 1024)" in entries["--max-sessions"], entries["--max-sessions"]


def test_version_names_the_package_and_protocol_versions() -> None:
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["openenv-ws", openenv_ws.__version__, "(protocol", "v1)"]


# ---------------------------------------------------------------------------- unknown paths


def test_a_handshake_on_an_unknown_path_is_404_and_the_client_says_there_is_no_endpoint() -> None:
    with hostile_server() as server:
        for path in ("/nope", "/ws/extra", "/v1/sessions"):
            answer = exchange(
                server.host, server.port, upgrade_bytes(server.host, path=path), timeout=10 * UNIT
            )
            assert answer.status == 404, (path, answer)
            assert b"/ws" in answer.body
        assert (
            exchange(server.host, server.port, upgrade_bytes(server.host), timeout=10 * UNIT).status
            == 101
        )
        with pytest.raises(ServerUnavailable) as info:
            EnvClient(f"ws://{server.host}:{server.port}/nope", open_timeout=10 * UNIT)
        assert not isinstance(info.value, AuthError)
        message = str(info.value)
        assert "no WebSocket endpoint" in message and "'/nope'" in message and "/ws" in message
        server.health()


# ---------------------------------------------------------------------------- the README


def readme_curl_lines() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.+?)\n```", text, flags=re.S) if "curl" in b)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def curl(argv: Sequence[str], port: int, session: str) -> tuple[int, dict[str, str], bytes]:
    """Replay a curl command line of the README against ``127.0.0.1:port``."""
    method, body, url = "GET", None, None
    for i, token in enumerate(argv):
        if token.startswith("-X"):
            method = token[2:]
        elif token == "-d":
            body = argv[i + 1].encode()
        elif token.startswith("localhost:8000/"):
            url = token.removeprefix("localhost:8000").replace("/ID", f"/{session}")
    assert argv[0] == "curl" and url is not None, argv
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30 * UNIT)
    try:
        conn.request(method, url, body=body)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_the_readme_curl_example_runs_as_written() -> None:
    lines = readme_curl_lines()
    assert [line[0] for line in lines] == ["curl"] * len(lines)
    with hostile_server("--env", "atari") as server:
        session = ""
        for argv in lines:
            status, headers, body = curl(argv, server.port, session)
            assert 200 <= status < 300, (shlex.join(argv), status, body[:300])
            assert b'"op":"error"' not in body, (shlex.join(argv), body[:300])
            if not session:
                session = headers["location"].rsplit("/", 1)[1]
        steps = [argv for argv in lines if any(t.endswith("/step") for t in argv)]
        assert steps, "the README's curl example takes no step"
