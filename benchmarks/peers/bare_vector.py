"""The floor of the rollout scenario: ale-py's engine behind a bare server.

A server process holds ``AtariVectorEnv`` engines with the rollout cell's
options and threads and does the least that any server built on that engine
must do to hand fresh observations to a client in another process on the same
host: read the actions from a loopback TCP socket, step, copy the observations
into a shared file mapping, and write a fixed-size reply (the slot, rewards,
terminated and truncated flags). The client copies the observations out of
the mapping, as every other row returns arrays of its own. No framing, no
encoding, no checks, no infos.

With ``batch_size`` < ``num_envs`` the server holds ``num_envs / batch_size``
engines taken in turn, as a vector session does: a request starts a step of
the engine whose batch was answered last and the reply is the engine that has
waited longest, so one engine steps while the client works on another's batch.

:func:`bare_server` starts :func:`serve` in a new interpreter (arguments: port,
mapping path, N, batch size, seed, threads, options as JSON); the parent
listens, the server connects.
"""

from __future__ import annotations

import collections
import contextlib
import json
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["bare_server", "obs_shape", "serve"]

#: Seconds the parent waits for the server to connect and load its ROMs.
START_TIMEOUT = 300.0


def obs_shape(options: Mapping[str, Any]) -> tuple[int, ...]:
    """One env's observation as ``AtariVectorEnv`` lays it out for `options`."""
    frame = (options["stack_num"], options["img_height"], options["img_width"])
    return frame if options["grayscale"] else (*frame, 3)


def _reply_size(batch: int) -> int:
    return 4 + batch * (8 + 1 + 1)


def _recv_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill `view` from `sock`; False at end of stream."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def _accept(listener: socket.socket, proc: subprocess.Popen[bytes]) -> socket.socket:
    """The server's connection, or RuntimeError as soon as it has exited without one."""
    listener.settimeout(0.25)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            return listener.accept()[0]
        except TimeoutError:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the bare server exited with {proc.returncode} before connecting"
                ) from None
    raise RuntimeError(f"the bare server did not connect within {START_TIMEOUT:g} s")


@contextlib.contextmanager
def bare_server(
    game: str, num_envs: int, batch_size: int, seed: int, threads: int, options: Mapping[str, Any]
) -> Iterator[tuple[Any, tuple[int, ...]]]:
    """A started bare server and a function stepping one batch of it with actions.

    Yields ``(batch, shape)``: ``batch(actions)`` sends `batch_size` actions and
    returns the observations of the batch answered, copied out; `shape` is one
    env's observation.
    """
    shape = obs_shape(options)
    slot_bytes = batch_size * int(np.prod(shape))
    slots = num_envs // batch_size
    shm_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with (
        tempfile.NamedTemporaryFile(dir=shm_dir, prefix="rollout-floor-") as backing,
        socket.create_server(("127.0.0.1", 0)) as listener,
    ):
        backing.truncate(slot_bytes * slots)
        region = mmap.mmap(backing.fileno(), slot_bytes * slots)
        argv = [
            sys.executable, "-c", f"import sys; from {__name__} import serve; serve(sys.argv[1:])",
            str(listener.getsockname()[1]), backing.name,
            str(num_envs), str(batch_size), str(seed), str(threads),
            json.dumps({"game": game, **options}),
        ]  # fmt: skip
        proc = subprocess.Popen(argv)
        sock: socket.socket | None = None
        try:
            sock = _accept(listener, proc)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reply = bytearray(_reply_size(batch_size))
            view = memoryview(reply)
            if not _recv_exact(sock, view[:1]):
                raise RuntimeError(f"the bare server exited with {proc.wait()}")
            frames = np.ndarray((slots, batch_size, *shape), np.uint8, region)
            conn = sock

            def batch(actions: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
                conn.sendall(actions.astype(np.int64, copy=False).tobytes())
                if not _recv_exact(conn, view):
                    raise RuntimeError("the bare server hung up")
                out: np.ndarray[Any, Any] = frames[int.from_bytes(view[:4], "little")].copy()
                return out

            yield batch, shape
        finally:
            if sock is not None:
                sock.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            region.close()


def serve(argv: list[str]) -> None:
    """The bare server, with the arguments :func:`bare_server` gives it."""
    from ale_py.vector_env import AtariVectorEnv

    port, path = int(argv[0]), argv[1]
    num_envs, batch_size, seed, threads = map(int, argv[2:6])
    options = json.loads(argv[6])
    game = options.pop("game")
    shape = obs_shape(options)
    count = num_envs // batch_size
    engines = [
        AtariVectorEnv(game, batch_size, batch_size=batch_size, num_threads=threads, **options)
        for _ in range(count)
    ]
    with open(path, "r+b") as backing:
        region = mmap.mmap(backing.fileno(), 0)
    frames = np.ndarray((count, batch_size, *shape), np.uint8, region)
    held: dict[int, np.ndarray[Any, Any]] = {}
    for k, engine in enumerate(engines):
        held[k] = engine.reset(seed=seed + k * batch_size)[0]
    due = collections.deque(range(count))
    current = due.popleft()
    frames[current] = held.pop(current)
    paddles = np.ones(batch_size, np.float32)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request = bytearray(8 * batch_size)
    view = memoryview(request)
    sock.sendall(b"r")
    while _recv_exact(sock, view):
        engines[current].ale.send(np.frombuffer(request, np.int64), paddles)
        due.append(current)
        current = due.popleft()
        obs = held.pop(current, None)
        if obs is None:
            obs, reward, terminated, truncated, _ = engines[current].ale.recv()
        else:
            reward = np.zeros(batch_size)
            terminated = truncated = np.zeros(batch_size, np.bool_)
        frames[current] = obs
        sock.sendall(
            current.to_bytes(4, "little")
            + reward.astype(np.float64).tobytes()
            + terminated.astype(np.uint8).tobytes()
            + truncated.astype(np.uint8).tobytes()
        )
    for unit in due:  # steps still running: wait for them before closing
        if unit not in held:
            engines[unit].ale.recv()
    for engine in engines:
        engine.close()
