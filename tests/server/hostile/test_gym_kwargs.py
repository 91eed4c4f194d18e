"""Gymnasium kwargs a client chooses (issue 35, findings 1, 3 and 4): no path, no unbounded size.

A real ``openenv-ws serve --env gymnasium`` is attacked over the raw wire while a
CartPole neighbour steps. MuJoCo's ``xml_file`` used to read any file of the server (its
errors an oracle of what exists and what it holds; a FIFO blocked the build for good,
and in a vector open the event loop itself); FrozenLake's ``desc`` of 600x600 took
1.4 GB and 18 s to build; ``frame_skip: 10**9`` made a step run for hours; render width
5000 made every result 75 MB. Each is refused with a non-fatal ``bad_config`` before
anything is built, the same connection then opens a sane session; allowed kwargs at
their bounds still equal ``gymnasium.make``; ``--gym-kwargs`` widens the list.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest

from openenv_ws.brief import brief
from openenv_ws.envs.gym_kwargs import KWARGS_ENV
from openenv_ws.protocol import Error, Open, Opened, Reset, Result, Step, encode

from ..._rawwire import masked, open_session, reply, request
from .conftest import HostileServer, Neighbour, assert_contained, hostile_server
from .test_cli import assert_one_line_error, cli

NEIGHBOUR = {"id": "CartPole-v1"}
HOPPER_XML = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / "hopper.xml"


@contextlib.contextmanager
def gym_server(cwd: Path, *flags: str, env: dict[str, str]) -> Iterator[HostileServer]:
    """``openenv-ws serve --env gymnasium FLAGS`` started in `cwd` (MuJoCo logs where it runs)."""
    with contextlib.ExitStack() as stack:
        with contextlib.chdir(cwd):
            srv = stack.enter_context(hostile_server("--env", "gymnasium", *flags, env=env))
        yield srv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileServer]:
    # No widening from the environment: the policy as shipped.
    with gym_server(tmp_path_factory.mktemp("gym-kwargs-cwd"), env={KWARGS_ENV: ""}) as srv:
        yield srv


def _release(fifo: Path) -> None:
    """Unblock whoever may be reading `fifo` (a server that opened it: a failed test)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _no_reader(fifo: Path) -> bool:
    """True when nothing holds `fifo` open for reading (a writer's non-blocking open fails)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        return exc.errno == errno.ENXIO
    return False


def _open(ws: Any, config: dict[str, Any], **open_args: Any) -> Any:
    return request(ws, Open(id=1, config=config, structured=True, **open_args))


def _refused(ws: Any, config: dict[str, Any], **open_args: Any) -> str:
    refused = _open(ws, config, **open_args)
    assert isinstance(refused, Error), f"config {brief(config)} was accepted: {brief(refused)}"
    assert refused.code == "bad_config" and not refused.fatal, refused
    return refused.message


def test_xml_file_paths_get_one_refusal_and_nothing_is_opened(
    server: HostileServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "model.xml"
    os.mkfifo(fifo)
    valid = tmp_path / "hopper.xml"
    shutil.copy(HOPPER_XML, valid)
    paths = ["/etc/passwd", str(fifo), "/etc/shadow", str(tmp_path), str(valid)]
    paths.append(str(tmp_path / "missing.xml"))
    rss = server.rss()
    try:
        with Neighbour(server, NEIGHBOUR) as neighbour, server.raw() as ws:
            messages = set()
            for path in paths:
                message = _refused(ws, {"id": "Hopper-v5", "kwargs": {"xml_file": path}})
                messages.add(message)
                neighbour.check()
            # One text whatever the path: nothing tells what exists or what it holds.
            assert len(messages) == 1, messages
            (message,) = messages
            assert "'xml_file' is not allowed for 'Hopper-v5'" in message, message
            assert "--gym-kwargs Hopper-v5:KEY" in message and KWARGS_ENV in message, message
            assert "frame_skip" in message, message  # the allowed keys are listed
            assert str(tmp_path) not in message and "/etc" not in message, message
            assert _no_reader(fifo), "the server opened the FIFO"
            open_session(ws, {"id": "Hopper-v5"})
            result = request(ws, Step(id=3, action=np.zeros(3, np.float32)))
            assert isinstance(result, Result), result
            assert_contained(server, neighbour, rss_before=rss)
    finally:
        _release(fifo)


def test_a_vector_open_of_a_fifo_leaves_the_event_loop_free(
    server: HostileServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "model.xml"
    os.mkfifo(fifo)
    config = {"id": "Hopper-v5", "kwargs": {"xml_file": str(fifo)}}
    try:
        with Neighbour(server, NEIGHBOUR) as neighbour, server.raw() as ws:
            ws.send_raw(masked(encode(Open(id=1, config=config, num_envs=2, structured=True))))
            # The event loop used to block in the FIFO's open until someone wrote to it.
            server.health()
            neighbour.check()
            refused = reply(ws)
            assert isinstance(refused, Error) and refused.code == "bad_config", brief(refused)
            assert "'xml_file' is not allowed for 'Hopper-v5'" in refused.message, refused
            assert _no_reader(fifo), "the server opened the FIFO"
    finally:
        _release(fifo)


SIZES = [
    pytest.param(
        {"id": "FrozenLake-v1", "kwargs": {"desc": ["S" + "F" * 599] + ["F" * 600] * 599}},
        "'desc'",
        "1..64 strings of equal length 1..64",
        id="desc-600x600",
    ),
    pytest.param(
        {"id": "Hopper-v5", "kwargs": {"frame_skip": 10**9}},
        "'frame_skip'",
        "an integer in 1..20",
        id="frame_skip-1e9",
    ),
    pytest.param(
        {"id": "Hopper-v5", "render": True, "kwargs": {"width": 5000, "height": 480}},
        "'width'",
        "an integer in 1..1024",
        id="render-width-5000",
    ),
    pytest.param(
        {"id": "HalfCheetah-v5", "render": True, "kwargs": {"height": 5000}},
        "'height'",
        "an integer in 1..1024",
        id="render-height-5000",
    ),
    pytest.param(
        {"id": "Taxi-v4", "kwargs": {"rainy_probability": float("nan")}},
        "'rainy_probability'",
        "a number in 0..1",
        id="nan",
    ),
    pytest.param(
        {"id": "Pendulum-v1", "kwargs": {"max_episode_steps": 2**62}},
        "'max_episode_steps'",
        "an integer in 1..2147483647",
        id="max_episode_steps",
    ),
]


@pytest.mark.parametrize(("config", "key", "allowed"), SIZES)
def test_size_and_work_kwargs_are_bounded(
    server: HostileServer, config: dict[str, Any], key: str, allowed: str
) -> None:
    rss = server.rss()
    with Neighbour(server, NEIGHBOUR) as neighbour, server.raw() as ws:
        message = _refused(ws, config)
        assert key in message and allowed in message, message
        assert len(message) < 400, message
        open_session(ws, NEIGHBOUR)
        assert isinstance(request(ws, Step(id=3, action=1)), Result)
        assert_contained(server, neighbour, rss_before=rss)


def test_unknown_keys_are_refused_listing_the_allowed_ones(server: HostileServer) -> None:
    with Neighbour(server, NEIGHBOUR) as neighbour, server.raw() as ws:
        message = _refused(ws, {"id": "CartPole-v1", "kwargs": {"bogus": 1, "render_fps": 5}})
        assert "'bogus', 'render_fps' are not allowed for 'CartPole-v1'" in message, message
        assert "allowed: max_episode_steps, sutton_barto_reward;" in message, message
        # An id the policy has no entry for takes only the common keys.
        message = _refused(ws, {"id": "Acrobot-v1", "kwargs": {"entry_point": "os:system"}})
        assert "names a file or code" in message and "allowed: max_episode_steps;" in message
        open_session(ws, {"id": "CartPole-v1", "kwargs": {"sutton_barto_reward": True}})
        neighbour.check()


def _play(ws: Any, env: gymnasium.Env[Any, Any], actions: list[Any], seed: int = 3) -> int:
    """Step the remote session on `ws` beside `env` (made in-process); returns episodes."""
    want, _ = env.reset(seed=seed)
    got = request(ws, Reset(id=10, seed=seed))
    assert isinstance(got, Result), got
    np.testing.assert_array_equal(got.obs, want)
    episodes = 0
    for i, action in enumerate(actions):
        want, reward, terminated, truncated, _ = env.step(action)
        got = request(ws, Step(id=11 + i, action=action))
        assert isinstance(got, Result), got
        np.testing.assert_array_equal(got.obs, want, err_msg=f"step {i}")
        assert (got.reward, got.terminated, got.truncated) == (reward, terminated, truncated)
        if terminated or truncated:
            episodes += 1
            seed += 1
            want, _ = env.reset(seed=seed)
            got = request(ws, Reset(id=10, seed=seed))
            np.testing.assert_array_equal(got.obs, want)
    env.close()
    return episodes


def test_allowed_kwargs_at_their_bounds_equal_gymnasium_make(server: HostileServer) -> None:
    lake = ["S" + "F" * 63] + ["FFFH" * 16] * 62 + ["F" * 63 + "G"]
    small = ["SFFH", "FHFF", "FFFG"]
    rng = np.random.default_rng(5)
    hopper = {"frame_skip": 20, "healthy_z_range": [0.5, float("inf")], "ctrl_cost_weight": 0.5}
    with Neighbour(server, NEIGHBOUR) as neighbour:
        with server.raw() as ws:
            # One past a bound is refused; at the bound the id is served as gymnasium.make.
            _refused(ws, {"id": "FrozenLake-v1", "kwargs": {"desc": [*lake, lake[-1]]}})
            _refused(ws, {"id": "FrozenLake-v1", "kwargs": {"desc": [r + "F" for r in lake]}})
            _refused(ws, {"id": "Hopper-v5", "kwargs": {"frame_skip": 21}})
        for env_id, kwargs, actions in (
            (
                "FrozenLake-v1",
                {"desc": lake, "is_slippery": True, "max_episode_steps": 500},
                [int(a) for a in rng.integers(0, 4, 300)],
            ),
            (
                "FrozenLake-v1",
                {"desc": small, "is_slippery": False, "reward_schedule": [5, -1, 0]},
                [int(a) for a in rng.integers(0, 4, 300)],
            ),
            ("Hopper-v5", hopper, [rng.uniform(-1, 1, 3).astype(np.float32) for _ in range(60)]),
        ):
            with server.raw() as ws:
                opened = _open(ws, {"id": env_id, "kwargs": kwargs})
                assert isinstance(opened, Opened), opened
                episodes = _play(ws, gymnasium.make(env_id, **kwargs), actions)
                assert episodes >= 1, (env_id, kwargs)  # each crosses an episode end
            neighbour.check()


def test_the_operator_widens_the_list_per_id(tmp_path: Path) -> None:
    valid = tmp_path / "hopper.xml"
    shutil.copy(HOPPER_XML, valid)
    flags = ["--workers", "2", "--gym-kwargs", "Hopper-v5:xml_file,frame_skip"]
    flags += ["--gym-kwargs", "Acrobot-v1:bad"]  # repeatable; reaches every worker
    env = {KWARGS_ENV: "CartPole-v1:render_fps"}  # the flag wins over the variable
    with (
        gym_server(tmp_path, *flags, env=env) as srv,
        Neighbour(srv, NEIGHBOUR) as neighbour,
    ):
        kwargs = {"xml_file": str(valid), "frame_skip": 30}  # frame_skip's bound lifted too
        rng = np.random.default_rng(6)
        for _ in range(4):  # connections land on either worker
            with srv.raw() as ws:
                opened = _open(ws, {"id": "Hopper-v5", "kwargs": kwargs})
                assert isinstance(opened, Opened), opened
                actions = [rng.uniform(-1, 1, 3).astype(np.float32) for _ in range(10)]
                _play(ws, gymnasium.make("Hopper-v5", **kwargs), actions)
        with srv.raw() as ws:
            # Widened keys still take plain values only, and only for the ids named.
            message = _refused(ws, {"id": "Walker2d-v5", "kwargs": {"xml_file": str(valid)}})
            assert "'xml_file' is not allowed for 'Walker2d-v5'" in message, message
            message = _refused(ws, {"id": "CartPole-v1", "kwargs": {"render_fps": 5}})
            assert "'render_fps' is not allowed" in message, message
            message = _refused(ws, {"id": "Hopper-v5", "kwargs": {"xml_file": b"hopper.xml"}})
            assert "kwargs 'xml_file' must hold plain values" in message, message
            message = _refused(ws, {"id": "Acrobot-v1", "kwargs": {"bad": 1}})  # reaches make
            assert "unexpected keyword argument 'bad'" in message, message
        neighbour.check()
        srv.health()


def test_a_malformed_widening_ends_serve_with_one_line() -> None:
    done = cli("serve", "--env", "gymnasium", "--port", "0", "--gym-kwargs", "Hopper-v5")
    assert_one_line_error(done, 1, "--gym-kwargs", "'Hopper-v5' is not of the form ID:KEY,KEY")
