"""The `memory-worker` command: the daemon, the clients of a running one, and file tools."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import apsw

from worker import commands, nats_config
from worker.commands import EXIT_CODES, Exit
from worker.config import ConfigError, load_config, nats_setting_problem
from worker.db import DatabaseTooNew, migrate, open_db, unusable
from worker.logs import configure_logging
from worker.nats_config import tenant_arg
from worker.redact import redact


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; 2 is "no worker answered" here (worker/commands.py),
    so usage errors get EX_USAGE (64) like the ones found after parsing."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}\n")


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _client(commands: Any, name: str, help: str, timeout: float) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = commands.add_parser(
        name, help=help, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    command.add_argument("--nats-url", help="NATS server (default: MEMORY_WORKER_NATS_URL)")
    command.add_argument("--inbox-prefix", help="private reply inbox, e.g. _INBOX_alice (tenants)")
    command.add_argument(
        "--timeout",
        type=_seconds,
        default=timeout,
        help=f"seconds for all of it (default {timeout:g})",
    )
    return command


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memory-worker", description=__doc__)
    parser.add_argument("--version", action="version", version=f"memory-worker {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the worker until SIGTERM or SIGINT")
    run.add_argument("--nats-url", help="NATS server to serve on (default: embedded server)")
    run.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    fire = _client(commands, "fire", "send one trigger and print the reply as JSON", 30.0)
    fire.add_argument(
        "trigger", help="trigger name, e.g. memory::evict, or its subject, e.g. memory.evict"
    )
    fire.add_argument("payload", nargs="?", default="{}", help="JSON request, or - for stdin")
    stats = _client(commands, "stats", "ask a running worker what it has done and holds", 10.0)
    stats.add_argument("--json", action="store_true", help="the memory::stats reply as JSON")
    stats.add_argument(
        "--tenant", help="under tenancy, count one tenant (an account name; '' the default)"
    )
    _client(commands, "check", "exit 0 if a memory worker answers $SRV.PING and is healthy", 3.0)
    cluster = _client(
        commands, "cluster", "sharded mode: partitions, owners, standbys, applied and lag", 10.0
    )
    cluster.add_argument("--json", action="store_true", help="the status as JSON")
    mcp = commands.add_parser("mcp", help="serve MCP tools for one agent, forwarding to a worker")
    mcp.add_argument("--nats-url", help="NATS server (default: MEMORY_WORKER_NATS_URL)")
    mcp.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds a tool call may take (default 10)"
    )
    mcp.add_argument("--agent", help="the agent whose memories the tools use (fixed)")
    mcp.add_argument(
        "--agent-header",
        help="HTTP mode: take the agent from this request header, set by a trusted proxy",
    )
    mcp.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on PORT (/mcp)")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    mcp.add_argument(
        "--allow-toggle", action="store_true", help="offer memory_toggle (off by default)"
    )
    mcp.add_argument("--inbox-prefix", help="private reply inbox, e.g. _INBOX_alice (tenants)")
    mcp.add_argument(
        "--sessions-per-token",
        type=_count,
        default=100,
        help="HTTP with tokens: open sessions one token may hold (default 100)",
    )
    ui = commands.add_parser(
        "ui", help="serve the memory browser: see and correct agents' memories"
    )
    ui.add_argument("--port", type=int, default=8700, help="HTTP port (default 8700)")
    ui.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    ui.add_argument("--nats-url", help="NATS server (default: MEMORY_WORKER_NATS_URL)")
    ui.add_argument("--tenant", help="an operator's connection under tenancy: the tenant shown")
    ui.add_argument("--inbox-prefix", help="private reply inbox, e.g. _INBOX_alice (tenants)")
    ui.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds a worker may take (default 10)"
    )
    token = commands.add_parser(
        "token", help="make a token for `mcp --http` or `ui`: the token once, and its file entry"
    )
    token.add_argument("--name", required=True, help="the token's name in the file")
    token.add_argument(
        "--agents",
        required=True,
        nargs="+",
        metavar="PATTERN",
        help="agent ids or fnmatch patterns the token may act for, e.g. 'alice-*'",
    )
    token.add_argument("--file", help="add the entry to this token file (made 0600 if new)")
    nats_conf = commands.add_parser(
        "nats-config", help="print the NATS server config: accounts, exports, imports per trigger"
    )
    nats_conf.add_argument(
        "--tenant",
        action="append",
        type=tenant_arg,
        metavar="ACCOUNT=USER,...",
        help="a tenant account and its users (repeat; default: the examples TEAM_A, TEAM_B)",
    )
    bench = commands.add_parser("bench", help="measure latency, throughput, RSS and quality")
    from worker.bench.arguments import add_arguments

    add_arguments(bench)
    backup = commands.add_parser("backup", help="copy the live database consistently to PATH")
    backup.add_argument("path")
    backup.add_argument("--db", dest="db_path")
    mig = commands.add_parser("migrate", help="create or upgrade the database, then exit")
    mig.add_argument("--db", dest="db_path")
    export = commands.add_parser("export", help="write agents as JSON Lines (stdout by default)")
    export.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    export.add_argument("--tenant", help="only this tenant ('' the default; default: every tenant)")
    export.add_argument("--agent", help="only this agent (of --tenant; default: every agent)")
    export.add_argument("--output", help="file to write instead of stdout")
    imp = commands.add_parser("import", help="add agents from an export file; safe to repeat")
    imp.add_argument("file", help="a file written by export, or - for stdin")
    imp.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    imp.add_argument("--tenant", help="put every record into this tenant (default: each its own)")
    split = commands.add_parser(
        "shard-split", help="one file per partition from a single database, for sharded mode"
    )
    split.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    split.add_argument(
        "--partitions",
        type=_partitions,
        help="how many (default: MEMORY_WORKER_PARTITIONS, 64); fixed for the cluster's life",
    )
    split.add_argument("--out", required=True, help="a new or empty directory for the files")
    split.add_argument(
        "--upload", action="store_true", help="put them in the snapshot bucket at sequence 0"
    )
    split.add_argument("--nats-url", help="NATS server (default: MEMORY_WORKER_NATS_URL)")
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml), as pip and bug reports name it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-worker")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def _partitions(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 1024:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 1024")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "token":  # needs no configuration: it only makes a secret
        return commands.token(args)
    if args.command == "nats-config":  # nor this: it prints the trigger table's config
        return nats_config.command(args)
    flags = {key: getattr(args, key, None) for key in ("nats_url", "db_path")}
    if flags["nats_url"] is not None and (problem := nats_setting_problem(flags["nats_url"])):
        print(f"memory-worker: --nats-url: {problem}", file=sys.stderr)
        return Exit.USAGE
    try:
        config = load_config(os.environ, **(flags if args.command != "fire" else {}))
    except ConfigError as error:
        print(f"memory-worker: configuration error: {error}", file=sys.stderr)
        return Exit.CONFIG
    configure_logging(config.log_level, config.log_format)
    if args.command == "run":
        from worker.app import run
        from worker.event_loop import run_on

        try:
            run_on(config.event_loop, run(config))
        except (DatabaseTooNew, RuntimeError, OSError) as error:
            print(f"memory-worker: {redact(str(error))}", file=sys.stderr)
            return 1
        return 0
    if args.command == "fire":
        return commands.fire(config, args)
    if args.command == "stats":
        return commands.stats(config, args)
    if args.command == "cluster":
        return commands.cluster(config, args)
    if args.command == "check":
        return commands.check(config, args)
    if args.command == "mcp":
        return commands.mcp(config, args)
    if args.command == "ui":
        from worker.ui.command import ui_command

        return ui_command(config, args)
    if args.command == "backup":
        from worker.backup import backup_database

        try:
            pages = backup_database(config.db_path, args.path)
        except (RuntimeError, apsw.Error, OSError) as error:
            print(f"memory-worker backup: {error}", file=sys.stderr)
            return 1
        print(f"backed up {config.db_path} to {args.path} ({pages} pages)", file=sys.stderr)
        return 0
    if args.command == "bench":
        from worker.bench.command import main as bench_main

        return bench_main(args)
    if args.command == "export":
        from worker.transfer.commands import export_command

        return export_command(config, args)
    if args.command == "import":
        from worker.transfer.commands import import_command

        return import_command(config, args)
    if args.command == "migrate":
        return _migrate(config.db_path)
    if args.command == "shard-split":
        from worker.shards.split import split_command

        return split_command(config, args)
    return 0


def _migrate(path: str) -> int:
    try:
        conn = open_db(path)
        try:
            print(f"schema version {migrate(conn)}: {path}")
        finally:
            conn.close()
    except apsw.Error as error:
        print(f"memory-worker: {unusable(path, error)}", file=sys.stderr)
        return 1
    except DatabaseTooNew as error:
        print(f"memory-worker: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
