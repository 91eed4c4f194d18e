"""What the ``openenv`` plugin accepts as an OpenEnv app, socket-free."""

from __future__ import annotations

import pytest
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action

from openenv_ws.envs.openenv import APP_ENV, load_app, openenv_factory, openenv_plugin
from openenv_ws.errors import EnvConfigError, InvalidAction
from tests.envs.openenv_envs.envs import (
    AsyncEnvironment,
    CounterEnvironment,
    CountObservation,
    EchoAction,
    EchoEnvironment,
    EchoObservation,
    ToolEnvironment,
)


def make_counter() -> CounterEnvironment:
    return CounterEnvironment()


def test_an_environment_class_names_its_models_in_its_annotations() -> None:
    app = load_app(CounterEnvironment)  # Environment[CountAction, CountObservation, State]
    assert app.observation_cls is CountObservation and app.concurrent
    echo = load_app(EchoEnvironment)  # step(self, action: EchoAction) -> EchoObservation
    assert (echo.action_cls, echo.observation_cls) == (EchoAction, EchoObservation)


def test_a_factory_function_annotated_or_not() -> None:
    assert load_app(make_counter).env_cls is CounterEnvironment
    built = load_app(lambda: EchoEnvironment(), EchoAction, EchoObservation)
    assert built.env_cls is EchoEnvironment  # read from one instance, as openenv-core does
    # Its step takes any Action: an MCPEnvironment gets openenv-core's MCP models.
    assert load_app(lambda: ToolEnvironment()).action_cls is CallToolAction


def test_strings_name_the_same_objects() -> None:
    app = load_app(
        "tests.envs.openenv_envs.envs:EchoEnvironment",
        "tests.envs.openenv_envs.envs:EchoAction",
        "tests.envs.openenv_envs.envs:EchoObservation",
    )
    assert (app.factory, app.action_cls) == (EchoEnvironment, EchoAction)
    with pytest.raises(EnvConfigError, match="not an openenv-core Observation"):
        load_app(EchoEnvironment, EchoAction, Action)


def test_sessions_take_no_config_and_the_entry_point_needs_an_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin = openenv_plugin(EchoEnvironment)
    with pytest.raises(EnvConfigError, match="unknown OpenEnv session option"):
        plugin({"id": "anything"})
    monkeypatch.delenv(APP_ENV, raising=False)
    with pytest.raises(EnvConfigError, match="--openenv-app"):
        openenv_factory({})
    monkeypatch.setenv(APP_ENV, "tests.envs.openenv_envs.envs:EchoEnvironment")
    env = openenv_factory({})
    try:
        env.reset()
        assert env.step({"message": "entry point"}).obs["message_length"] == 11
        with pytest.raises(InvalidAction, match="message: Input should be a valid string"):
            env.step({"message": 11})
    finally:
        env.close()


def test_inline_only_where_asked_and_never_for_async_environments() -> None:
    for env_cls, asked, inline in (
        (EchoEnvironment, False, False),
        (EchoEnvironment, True, True),
        (AsyncEnvironment, True, False),  # its coroutines run on a loop of their own
    ):
        env = openenv_plugin(env_cls, inline=asked)({})
        try:
            assert env.inline is inline, (env_cls, asked)
        finally:
            env.close()
