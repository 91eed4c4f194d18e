"""The ``openenv-ws serve`` options of the bundled environment plugins: which
Gymnasium ids ``--env gymnasium`` may make and which kwargs beyond its policy clients
may pass them, which OpenEnv app ``--env openenv`` serves. They reach the plugins (and
worker processes) as environment variables.
"""

from __future__ import annotations

import argparse
import os

from ..errors import EnvConfigError

__all__ = ["add_arguments", "apply"]


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """Add the plugins' options to the ``serve`` parser."""
    serve.add_argument(
        "--gym-ids",
        metavar="ID,ID,...",
        help="the Gymnasium ids --env gymnasium may make, comma-separated (ids import code); "
        "replaces the default list, and wins over the OPENENV_WS_GYM_IDS environment variable",
    )
    serve.add_argument(
        "--gym-kwargs",
        action="append",
        metavar="ID:KEY,KEY",
        help="with --env gymnasium: kwargs keys clients may pass to ID beyond its built-in "
        "allow-list, with any plain value and no bound (repeatable; path-like keys such as "
        "xml_file only this way); wins over the OPENENV_WS_GYM_KWARGS environment variable",
    )
    serve.add_argument(
        "--openenv-app",
        metavar="MODULE:ATTR",
        help="with --env openenv: the openenv-core Environment class (or factory) to serve, "
        "what an OpenEnv app.py passes to create_app",
    )
    serve.add_argument(
        "--openenv-action",
        metavar="MODULE:ATTR",
        help="with --openenv-app: its Action class (default: from its annotations or its package's models.py)",
    )
    serve.add_argument(
        "--openenv-observation",
        metavar="MODULE:ATTR",
        help="with --openenv-app: its Observation class (default: from its annotations or its package's models.py)",
    )
    serve.add_argument(
        "--openenv-inline",
        action="store_true",
        help="with --openenv-app: its calls are short; run them on the event loop",
    )
    serve.add_argument(
        "--openenv-handover",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="with --openenv-app, for an environment that hosts one session at a time (no "
        "SUPPORTS_CONCURRENT_SESSIONS): hand it to a new client once its session has sent "
        "no request for this long (0: never; default 10)",
    )


def apply(args: argparse.Namespace) -> None:
    """Hand the options to the plugins, for this process and its workers.

    Raises:
        SystemExit: a malformed ``--gym-kwargs``, or an ``--openenv-app`` (or its classes)
            that cannot be served.
    """
    if args.gym_ids is not None:
        from .gymnasium import IDS_ENV

        os.environ[IDS_ENV] = args.gym_ids
    if args.gym_kwargs is not None:
        from .gym_kwargs import KWARGS_ENV, parse_widening

        text = ";".join(args.gym_kwargs)
        try:
            parse_widening(text, "--gym-kwargs")
        except EnvConfigError as exc:
            raise SystemExit(str(exc)) from None
        os.environ[KWARGS_ENV] = text
    if args.openenv_app is None:
        return
    from . import openenv

    try:
        openenv.load_app(args.openenv_app, args.openenv_action, args.openenv_observation)
    except EnvConfigError as exc:
        raise SystemExit(f"--openenv-app: {exc}") from None
    os.environ[openenv.APP_ENV] = args.openenv_app
    os.environ[openenv.ACTION_ENV] = args.openenv_action or ""
    os.environ[openenv.OBSERVATION_ENV] = args.openenv_observation or ""
    os.environ[openenv.INLINE_ENV] = "1" if args.openenv_inline else ""
    if not 0 <= args.openenv_handover < float("inf"):
        raise SystemExit(f"--openenv-handover must be seconds >= 0, got {args.openenv_handover}")
    os.environ[openenv.HANDOVER_ENV] = repr(args.openenv_handover)
