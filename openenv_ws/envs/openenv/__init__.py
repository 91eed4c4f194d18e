"""OpenEnv environments served unchanged, as an openenv-ws environment plugin (entry point ``openenv``).

Point the server at what an OpenEnv ``app.py`` passes to openenv-core's
``create_app(env_factory, ActionCls, ObservationCls)``::

    openenv-ws serve --env openenv --openenv-app my_env.server.env:EchoEnvironment
    # the classes, when neither its annotations nor its package's models.py name them:
    #   --openenv-action my_env.models:EchoAction --openenv-observation my_env.models:EchoObservation

(the options set the environment variables :data:`APP_ENV`, :data:`ACTION_ENV`
and :data:`OBSERVATION_ENV`, which is how worker processes get them);
:func:`openenv_plugin` does the same in Python. The session config is empty:
the server decides which code runs, never a client.

Each session gets its own instance of the environment. Its spaces are
:class:`~openenv_ws.spaces.JsonSpec`: the JSON schemas of the Action and
Observation models, named by class; ``spec.extra`` holds ``state_schema`` and
``openenv_metadata`` (the environment's ``get_metadata()``).

- An action is a map validated into the Action model (openenv-core's
  ``deserialize_action``, so ``{"type": "call_tool", ...}`` and
  ``{"type": "list_tools"}`` reach an MCP environment); a map the model
  refuses is ``invalid_action`` naming the fields, the session goes on.
- An observation is the model's dump without ``done`` and ``metadata``
  (``reward`` stays, None included, so the dump is the model's own); the
  result's reward is the Observation's (0.0 for None), ``terminated`` its
  ``done``, ``info`` its ``metadata``.
- An environment whose class does not set ``SUPPORTS_CONCURRENT_SESSIONS``
  gets one session at a time per server process: a second ``open`` meanwhile
  is refused with ``capacity`` (retry later; ``serve --workers N`` gives N),
  unless the session holding it has had no call for the handover window
  (``--openenv-handover`` / :data:`HANDOVER_ENV`, default
  :data:`DEFAULT_HANDOVER` s): then the newcomer gets the environment and the
  idle session's next request gets ``idle_timeout`` (a stray ``POST /reset``
  does not lock the environment for the HTTP session TTL).
  OpenEnv's ``GET /schema`` and ``/metadata`` read the spec of a built instance
  (until an OpenEnv client opened a session): meanwhile they say ``capacity`` too.
- Calls run on the session's worker thread under the server's per-call
  deadline, never on the event loop (``--openenv-inline`` / :data:`INLINE_ENV`
  says the environment's calls are short enough to run inline). An
  environment that overrides ``reset_async`` or ``step_async`` (MCP
  environments do), or offers ``mcp_session``, gets an event loop of its own
  on a thread of its own, where its coroutines run and its MCP session stays
  open for the session's lifetime: however it awaits, no other session waits.
  An environment that sets ``REQUIRES_SINGLE_THREAD_EXECUTOR`` (thread-bound
  libraries) is built, called and closed on one thread shared by all its
  instances, as openenv-core's server does: its sessions' calls take turns.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ...environment import check_keys
from ...errors import EnvConfigError
from ...registry import EnvPlugin
from .app import DEFAULT_HANDOVER, OpenEnvApp, load_app
from .environment import OpenEnvEnvironment

__all__ = [
    "ACTION_ENV",
    "APP_ENV",
    "DEFAULT_HANDOVER",
    "HANDOVER_ENV",
    "INLINE_ENV",
    "OBSERVATION_ENV",
    "OpenEnvApp",
    "OpenEnvEnvironment",
    "handover_from_env",
    "load_app",
    "openenv_factory",
    "openenv_plugin",
]


#: Environment variable: ``module:attr`` of the environment class or factory to serve.
APP_ENV = "OPENENV_WS_OPENENV_APP"
#: Environment variable: ``module:attr`` of its Action class (default: found, see :func:`load_app`).
ACTION_ENV = "OPENENV_WS_OPENENV_ACTION"
#: Environment variable: ``module:attr`` of its Observation class (default: found, see :func:`load_app`).
OBSERVATION_ENV = "OPENENV_WS_OPENENV_OBSERVATION"
#: Environment variable: ``1`` when the environment's calls may run on the event loop.
INLINE_ENV = "OPENENV_WS_OPENENV_INLINE"
#: Environment variable: the handover window in seconds (``0``: never hand over).
HANDOVER_ENV = "OPENENV_WS_OPENENV_HANDOVER"


def openenv_plugin(
    env: Any,
    action_cls: Any = None,
    observation_cls: Any = None,
    *,
    inline: bool = False,
    handover: float | None = DEFAULT_HANDOVER,
) -> EnvPlugin[OpenEnvEnvironment]:
    """A plugin serving an OpenEnv environment, for ``create_app`` (see :func:`load_app`)."""
    app = load_app(env, action_cls, observation_cls, inline=inline, handover=handover)

    def factory(config: dict[str, Any]) -> OpenEnvEnvironment:
        check_keys(config, (), "OpenEnv session")
        return OpenEnvEnvironment(app)

    return EnvPlugin(factory, build_off_loop=True)


_loaded: dict[tuple[str, str, str, bool, float | None], OpenEnvApp] = {}


def handover_from_env() -> float | None:
    """The handover window :data:`HANDOVER_ENV` sets (default :data:`DEFAULT_HANDOVER`;
    ``0``: None, never hand over)."""
    text = os.environ.get(HANDOVER_ENV, "")
    if not text:
        return DEFAULT_HANDOVER
    try:
        seconds = float(text)
    except ValueError:
        raise EnvConfigError(f"{HANDOVER_ENV} must be seconds, got {text[:40]!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise EnvConfigError(f"{HANDOVER_ENV} must be finite seconds >= 0, got {text[:40]!r}")
    return seconds or None


_loading = threading.Lock()


def openenv_factory(config: dict[str, Any]) -> OpenEnvEnvironment:
    """The ``openenv`` entry point: serves the app named by :data:`APP_ENV`."""
    target = os.environ.get(APP_ENV, "")
    if not target:
        raise EnvConfigError(
            f"no OpenEnv app to serve: start the server with --openenv-app module:EnvClass "
            f"(or set {APP_ENV})"
        )
    check_keys(config, (), "OpenEnv session")
    key = (
        target,
        os.environ.get(ACTION_ENV, ""),
        os.environ.get(OBSERVATION_ENV, ""),
        os.environ.get(INLINE_ENV, "") == "1",
        handover_from_env(),
    )
    with _loading:
        app = _loaded.get(key)
        if app is None:
            app = _loaded[key] = load_app(
                key[0], key[1] or None, key[2] or None, inline=key[3], handover=key[4]
            )
    return OpenEnvEnvironment(app)
