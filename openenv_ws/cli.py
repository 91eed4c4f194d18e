"""The ``openenv-ws`` command: ``serve``, ``bench``, and the subcommands plugins add
(the Atari plugin's ``demo`` and ``games``)."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import secrets
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint
from typing import Any

from .environment import Environment
from .envs import options as env_options
from .errors import EnvConfigError
from .registry import DEFAULT_ENV, Command, EnvPlugin, command_entry_points, load_env
from .server.limits import ServerLimits, SettingError

__all__ = ["main"]

logger = logging.getLogger("openenv_ws.cli")


def _load_env(spec: str) -> EnvPlugin[Environment]:
    """``--env``'s environment, or a SystemExit saying why it cannot be loaded."""
    try:
        return load_env(spec)
    except EnvConfigError as exc:
        raise SystemExit(f"--env {spec!r} cannot be loaded: {exc}") from None


def _json_config(text: str, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line, or a SystemExit saying what is wrong."""
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"{flag} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    from .footprint import map_large_buffers
    from .server import bind_socket, create_app, uvicorn_config
    from .server.runtime.workers import WorkerBoard, reserve_port, run_workers
    from .server.transport.auth import TOKEN_ENV, exposure_warning, served_hosts
    from .server.transport.guard import connection_cap
    from .server.transport.serve import tls_problem

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    map_large_buffers()  # sessions' large frames go back to the system with them
    limits = _limits(args)
    problem = tls_problem(args.certfile, args.keyfile, args.keyfile_password)
    if problem is not None:
        raise SystemExit(problem)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    env_options.apply(args)
    plugin = _load_env(args.env)
    openenv_config = _env_config(plugin, args.openenv_config, "--openenv-config")
    warm = [_env_config(plugin, text, "--pool-warm") for text in args.pool_warm]
    warm = warm or [dict(config) for config in plugin.warm]
    board = WorkerBoard(args.workers) if args.workers > 1 else None
    if board is not None:
        # One secret for all workers: a client's sessions may sit on different ones.
        for name in plugin.shared_secrets:
            os.environ.setdefault(name, secrets.token_hex(32))

    def build_app() -> Any:  # in each worker, after the fork
        return create_app(
            plugin,
            limits=limits,
            web=args.web,
            token=token,
            openenv_config=openenv_config,
            pool=_warm_pool(args, plugin, warm),
            workers=board,
            allowed_origins=args.allow_origin,
            allowed_hosts=hosts,
        )

    try:
        sock = reserve_port(args.host, args.port) if board else bind_socket(args.host, args.port)
    except OSError as exc:
        raise SystemExit(_listen_problem(args.host, args.port, exc)) from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    hosts, host_warning = served_hosts(args.host, args.allow_host)
    cap_warning = None
    if limits.max_connections is not None:
        cap, cap_warning = connection_cap(limits.max_connections)
        limits = dataclasses.replace(limits, max_connections=cap)
    for warning in (exposure_warning(args.host, token), host_warning, cap_warning):
        if warning is not None:
            logger.warning(warning)
    config = uvicorn_config(
        build_app() if board is None else None,
        limits=limits,
        host=args.host,
        port=port,
        log_level=args.log_level,
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        ssl_keyfile_password=args.keyfile_password,
    )
    s = "s" if args.certfile else ""  # TLS: wss:// and https://
    print(f"openenv-ws: serving protocol v1 on ws{s}://{shown}:{port}/ws", flush=True)
    if args.web:
        print(f"openenv-ws: web page on http{s}://{shown}:{port}/web/", flush=True)
    if board is not None:

        def serve_worker(listener: Any, index: int) -> None:
            config.app = build_app()
            _serve_process(config, listener, freeze=args.gc_freeze)

        return run_workers(args.workers, serve_worker, host=args.host, port=port, board=board)
    _serve_process(config, sock, freeze=args.gc_freeze)
    return 0


def _serve_process(config: Any, sock: Any, *, freeze: bool) -> None:
    """Serve until stopped, in a process that does nothing else.

    With `freeze`, what exists by now (modules, the app) lives as long as the
    process, so the collector stops scanning it: a full collection over the
    imported modules takes ~10-30 ms, with every session of the process
    paused (``openenv_ws_process_gc_pause_seconds`` in ``/metrics``).
    """
    from .server.transport.drain import DrainingServer

    if freeze:
        gc.collect()
        gc.freeze()
    DrainingServer(config).run(sockets=[sock])


def _listen_problem(host: str, port: int, exc: OSError) -> str:
    """One line saying why the server cannot listen at ``host:port``, and what to do."""
    import errno

    where = f"cannot listen on {host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return f"{where}: the port is in use (another server?); stop it or pick another --port"
    if exc.errno == errno.EACCES:
        return f"{where}: permission denied (ports below 1024 need privileges); pick another --port"
    return f"{where}: {exc.strerror or exc}; check --host and --port"


def _port(text: str) -> int:
    """``--port``: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number from 0 to 65535, got {text!r}"
        ) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 (any free port) to 65535, got {port}")
    return port


def _env_config(plugin: EnvPlugin[Environment], text: str, flag: str) -> dict[str, Any]:
    """An environment config given on the command line, checked before serving where the
    environment can check one without building it (Atari): a config it refuses would
    fail every session, or every worker that builds its warm pool."""
    config = _json_config(text, flag)
    if plugin.normalize is not None:
        try:
            plugin.normalize(config)
        except EnvConfigError as exc:
            raise SystemExit(f"{flag} {text}: {exc}") from None
    return config


def _limits(args: argparse.Namespace) -> ServerLimits:
    """The server's limits from their flags (a flag left out: the field's default), or a
    SystemExit naming the flag out of range; the memory budget is the server's, split
    between its workers."""
    given: dict[str, Any] = {}
    for name, flag, _ in ServerLimits.flags():
        value = getattr(args, name)
        if value is None:
            continue
        given[name] = None if flag.zero_is_none and value == 0 else value
    try:
        limits = ServerLimits(**given)
    except SettingError as exc:
        raise SystemExit(f"{_flag_name(exc.name)} {exc.problem}") from None
    return dataclasses.replace(limits, memory_budget=limits.memory_budget // max(1, args.workers))


def _flag_name(field: str) -> str:
    """The ``openenv-ws serve`` flag of the field `field` of :class:`ServerLimits`."""
    flag = {name: flag for name, flag, _ in ServerLimits.flags()}[field]
    return flag.name or "--" + field.replace("_", "-")


def _add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """A flag for each field of :class:`ServerLimits`, as the field declares it."""
    for name, flag, default in ServerLimits.flags():
        option = _flag_name(name)
        parser.add_argument(
            option,
            dest=name,
            type=flag.parse or type(default),
            default=default,
            metavar=flag.metavar or option.removeprefix("--").replace("-", "_").upper(),
            help=flag.help,
        )


def _warm_pool(
    args: argparse.Namespace, plugin: EnvPlugin[Environment], warm: list[dict[str, Any]]
) -> Any:
    """The ``--pool-size`` warm pool (None when 0); configs are keyed after normalizing."""
    if args.pool_size <= 0:
        return None
    from .server.runtime.pool import WarmPool, normalized_key

    return WarmPool(
        plugin,
        size=args.pool_size,
        key=normalized_key(plugin.normalize) if plugin.normalize is not None else None,
        warm=warm,
        recycle=args.pool_recycle,
        build_share=args.cold_open_share,
    )


class _HelpFormatter(argparse.HelpFormatter):
    """Help that gives the default of every option taking a value (unless it says it)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.option_strings
            and action.nargs != 0
            and action.default not in (None, [], argparse.SUPPRESS)
            and "default" not in text
        ):
            text += " (default: %(default)s)"
        return text


def _parser() -> argparse.ArgumentParser:
    from .protocol import PROTOCOL_VERSION
    from .version import __version__

    parser = argparse.ArgumentParser(
        prog="openenv-ws", description=__doc__, formatter_class=_HelpFormatter
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {__version__} (protocol v{PROTOCOL_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve", help="run a server", usage="%(prog)s [options]", formatter_class=_HelpFormatter
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind")
    serve.add_argument("--port", type=_port, default=8000, help="port (0: any free port)")
    serve.add_argument(
        "--certfile",
        metavar="PATH",
        help="serve TLS (wss://, https://) with this PEM certificate (chain), its key too "
        "unless --keyfile is given",
    )
    serve.add_argument("--keyfile", metavar="PATH", help="the certificate's PEM private key")
    serve.add_argument(
        "--keyfile-password",
        metavar="TEXT",
        help="the password of an encrypted --keyfile (other users may see it in the process "
        "list: prefer a key file only the server's user can read)",
    )
    serve.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help="an installed environment (atari, fake, ...) or module:factory",
    )
    env_options.add_arguments(serve)
    _add_limit_flags(serve)
    serve.add_argument(
        "--openenv-config",
        default="{}",
        help="JSON environment config of the sessions OpenEnv's clients open (their requests "
        'carry none), e.g. {"game": "breakout"}',
    )
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="what the server logs",
    )
    serve.add_argument(
        "--token",
        default=None,
        help="bearer token clients must send (default: the OPENENV_WS_TOKEN environment "
        "variable, which also keeps it out of the process list)",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a browser origin (scheme://host[:port], or '*') whose pages may use the server "
        "besides its own web page; repeatable. WebSocket handshakes and HTTP POST/DELETE "
        "requests from other origins get HTTP 403; clients that are not browsers send no "
        "origin and are not affected",
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients reach the server by, besides localhost and IP addresses "
        "(repeatable; '*': any). Requests naming another host (the Host header) get HTTP 403, "
        "which keeps web pages from reaching the server through DNS rebinding (default when "
        "bound to a wildcard address such as 0.0.0.0: any host)",
    )
    serve.add_argument(
        "--no-web",
        dest="web",
        action="store_false",
        help="do not serve the web page (/ and /web/) to watch or play a session",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port (ALE holds the GIL: one core each)",
    )
    serve.add_argument(
        "--pool-size",
        type=int,
        default=2,
        help="ready-built environments kept per configuration, per worker (0: no warm pool)",
    )
    serve.add_argument(
        "--pool-warm",
        action="append",
        default=[],
        metavar="JSON",
        help="a config to keep warm from the start (repeatable; default: the environment's "
        "own, atari's is '{}')",
    )
    serve.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        help="let the garbage collector keep scanning the objects built before serving "
        "(default: they are frozen, which makes full collections ~10x shorter)",
    )
    serve.add_argument(
        "--no-pool-recycle",
        dest="pool_recycle",
        action="store_false",
        help="hand out only never-used environments (default: a session's environment goes "
        "back to the pool when it ends, reset to its as-built state, so no ROM is loaded)",
    )
    serve.set_defaults(func=cmd_serve)

    for name, entry in command_entry_points().items():
        if name not in ("serve", "bench"):  # a plugin adds commands, it does not replace ours
            _add_command(sub, name, entry)

    # The suite parses its own options (openenv-ws bench --help).
    bench = sub.add_parser("bench", help="run the benchmark suite", add_help=False)
    bench.set_defaults(func=cmd_bench, passthrough=True)
    return parser


def _add_command(sub: Any, name: str, entry: EntryPoint) -> None:
    """The subcommand a plugin adds; one that cannot be loaded says why when run."""
    try:
        command = entry.load()
        if not isinstance(command, Command):
            raise TypeError(f"{entry.value} is not an openenv_ws.registry.Command")
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the other commands
        reason = f"{name}: the command {entry.value} cannot be loaded: {exc}"

        def broken(args: argparse.Namespace) -> int:
            raise SystemExit(reason)

        sub.add_parser(name, help=f"(cannot be loaded: {exc})").set_defaults(func=broken)
        return
    parser = sub.add_parser(name, help=command.help, formatter_class=_HelpFormatter)
    command.add_arguments(parser)
    parser.set_defaults(func=command.run)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import main as bench_main

    return bench_main(args.extra)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
