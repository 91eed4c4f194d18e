"""The environment registry: names and ``module:attr`` to plugins, and plugin subcommands."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

from openenv_ws import cli
from openenv_ws.errors import EnvConfigError
from openenv_ws.registry import (
    COMMAND_GROUP,
    DEFAULT_ENV,
    Command,
    EnvPlugin,
    as_plugin,
    command_entry_points,
    env_names,
    load_env,
)
from openenv_ws.testing import FakeEnvironment, fake_factory
from openenv_ws.web import env_choices

from .conftest import UNIT


def test_the_installed_environments_are_found_by_name() -> None:
    assert {"atari", "fake"} <= set(env_names())
    assert DEFAULT_ENV == "atari"
    fake = load_env("fake")
    assert fake.factory is fake_factory and fake.normalize is None and fake.warm == ()
    env = fake({"episode_length": 3})
    assert isinstance(env, FakeEnvironment)
    env.close()


def test_atari_is_a_plugin_with_its_checks_and_choices() -> None:
    import atari
    from atari.snapshots import SNAPSHOT_KEY_ENV

    plugin = load_env("atari")
    normalize = plugin.normalize
    assert plugin is atari.atari_factory
    assert normalize is atari.normalize_config and plugin.warm == ({},)
    assert plugin.shared_secrets == (SNAPSHOT_KEY_ENV,)
    choices = env_choices(plugin)
    assert choices["env"] == "atari" and "pong" in choices["games"]
    with pytest.raises(EnvConfigError, match="unknown game"):
        normalize({"game": "pongg"})


def test_module_attr_names_a_factory_or_a_plugin() -> None:
    plugin = load_env("openenv_ws.testing:fake_factory")
    assert isinstance(plugin, EnvPlugin) and plugin.factory is fake_factory
    assert load_env("atari.plugin:atari_factory") is load_env("atari")
    assert as_plugin(plugin) is plugin


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuch", "no environment named 'nosuch' is installed .*atari.*fake"),
        ("nosuchmodule:factory", "cannot be imported: No module named 'nosuchmodule'"),
        ("openenv_ws.testing:nosuch", "cannot be imported: .*nosuch"),
        ("openenv_ws.testing:MAX_STEPS", "neither an environment factory nor an EnvPlugin"),
        (":fake_factory", "not of the form module:attr"),
    ],
)
def test_what_cannot_be_loaded_says_why(spec: str, message: str) -> None:
    with pytest.raises(EnvConfigError, match=message):
        load_env(spec)


def test_plugin_commands_are_subcommands() -> None:
    assert {"demo", "games"} <= set(command_entry_points())
    demo = command_entry_points()["demo"].load()
    assert isinstance(demo, Command)
    args = cli._parser().parse_args(["demo", "--seed", "3"])
    assert args.func is demo.run and args.seed == 3 and args.max_steps is None


def test_a_command_that_cannot_be_loaded_says_why_and_the_others_still_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = EntryPoint("broken", "nosuchmodule:command", COMMAND_GROUP)
    not_a_command = EntryPoint("odd", "openenv_ws.testing:fake_factory", COMMAND_GROUP)
    monkeypatch.setattr(
        cli, "command_entry_points", lambda: {"broken": broken, "odd": not_a_command}
    )
    parser = cli._parser()
    assert parser.parse_args(["serve", "--env", "fake"]).env == "fake"
    for name, reason in (("broken", "No module named 'nosuchmodule'"), ("odd", "not an openenv")):
        args = parser.parse_args([name])
        with pytest.raises(SystemExit, match=reason):
            args.func(args)


def test_serve_names_the_installed_environments_when_one_is_unknown() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "openenv_ws", "serve", "--env", "nosuch", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60 * UNIT,
        check=False,
    )
    assert done.returncode == 1
    assert "--env 'nosuch' cannot be loaded: no environment named 'nosuch'" in done.stderr
    assert "installed: " in done.stderr and "fake" in done.stderr
