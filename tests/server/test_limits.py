"""ServerLimits: one settings object, checked when made, and the ``serve`` flags made from it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from openenv_ws.cli import _limits, _parser
from openenv_ws.server import ServerLimits, create_app, uvicorn_config
from openenv_ws.server.limits import SettingError
from openenv_ws.testing import fake_factory


def serve_args(*argv: str) -> Any:
    return _parser().parse_args(["serve", "--env", "fake", *argv])


def test_every_field_has_a_check_and_a_serve_flag_that_sets_it() -> None:
    parser = _parser()
    serve = next(a for a in parser._actions if a.dest == "command").choices["serve"]  # type: ignore[union-attr]
    dests = {action.dest: action for action in serve._actions}
    for item in dataclasses.fields(ServerLimits):
        assert item.metadata["check"] is not None, item.name
        action = dests[item.name]  # the flag writes the field, by its name
        assert action.help and action.option_strings, item.name


def test_the_flags_left_out_give_the_fields_defaults() -> None:
    assert _limits(serve_args()) == ServerLimits()


def test_zero_on_the_command_line_is_no_limit_where_the_flag_says_so() -> None:
    limits = _limits(serve_args("--idle-timeout", "0", "--max-head-size", "0", "--grace", "0"))
    assert limits.idle_timeout is None and limits.max_head_size is None
    assert limits.resume_grace == 0  # 0 is a value of its own: no resume


def test_the_memory_budget_is_split_between_the_workers() -> None:
    limits = _limits(serve_args("--memory-budget", "8G", "--workers", "4"))
    assert limits.memory_budget == 2 << 30


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("max_envs", 0, "must be at least 1, got 0"),
        ("max_sessions_per_peer", 0, "must be at least 1, got 0"),
        ("idle_timeout", -1.0, "must be above 0, got -1.0"),
        ("write_timeout", math.nan, "must be above 0 s, got nan"),
        ("control_rate", 0.5, "must be at least 1, got 0.5"),
        ("busy_poll", 10.5, "must be between 0 and 10 seconds, got 10.5"),
        ("cold_open_share", 0.0, "must be in (0, 1] (1: no pacing), got 0.0"),
        ("compression", ("gzip",), "names codecs the protocol does not know: gzip"),
    ],
)
def test_a_value_out_of_range_is_refused_naming_its_field(
    field: str, value: Any, problem: str
) -> None:
    with pytest.raises(SettingError) as info:
        ServerLimits(**{field: value})
    assert info.value.name == field
    assert str(info.value).startswith(f"ServerLimits.{field} {problem}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--max-envs", "0"), "--max-envs must be at least 1, got 0"),
        (("--grace", "-1"), "--grace must be at least 0, got -1.0"),
        (("--control-frame-rate", "0.5"), "--control-frame-rate must be at least 1, got 0.5"),
        (("--busy-poll", "-1"), "--busy-poll must be between 0 and 10 seconds, got -1.0"),
    ],
)
def test_serve_names_the_flag_of_a_value_out_of_range(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        _limits(serve_args(*argv))
    assert str(info.value) == message


def test_uvicorn_serves_with_the_apps_limits() -> None:
    limits = ServerLimits(max_frame_size=12_345, ping_interval=None, drain_timeout=3.0)
    config = uvicorn_config(create_app(fake_factory, limits=limits))
    assert config.ws_max_size == 12_345
    assert config.ws_ping_interval is None
    assert config.timeout_graceful_shutdown == 3.0
    assert uvicorn_config(create_app(fake_factory)).ws_max_size == ServerLimits().max_frame_size
