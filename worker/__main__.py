"""The `memory-worker` command: run, fire, check, migrate."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence

import msgspec

from worker.config import Config, ConfigError, load_config
from worker.db import DatabaseTooNew, migrate, open_db
from worker.logs import configure_logging
from worker.redact import redact

Render = Callable[[str], str]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-worker", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the worker until SIGTERM or SIGINT")
    run.add_argument("--nats-url", help="NATS server to serve on (default: embedded server)")
    run.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    fire = commands.add_parser("fire", help="send one trigger and print the reply as JSON")
    fire.add_argument("trigger", help="trigger name, e.g. memory::evict")
    fire.add_argument("payload", nargs="?", default="{}", help="JSON request, or - for stdin")
    fire.add_argument("--nats-url")
    fire.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    stats = commands.add_parser("stats", help="ask a running worker what it has done and holds")
    stats.add_argument("--nats-url")
    stats.add_argument("--timeout", type=float, default=10.0)
    stats.add_argument("--json", action="store_true", help="the memory::stats reply as JSON")
    check = commands.add_parser("check", help="exit 0 if a memory worker answers $SRV.PING")
    check.add_argument("--nats-url")
    check.add_argument("--timeout", type=float, default=3.0)
    bench = commands.add_parser("bench", help="measure latency, throughput, RSS and quality")
    from worker.bench import add_arguments

    add_arguments(bench)
    backup = commands.add_parser("backup", help="copy the live database consistently to PATH")
    backup.add_argument("path")
    backup.add_argument("--db", dest="db_path")
    mig = commands.add_parser("migrate", help="create or upgrade the database, then exit")
    mig.add_argument("--db", dest="db_path")
    export = commands.add_parser("export", help="write agents as JSON Lines (stdout by default)")
    export.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    export.add_argument("--agent", help="only this agent (default: every agent)")
    export.add_argument("--output", help="file to write instead of stdout")
    imp = commands.add_parser("import", help="add agents from an export file; safe to repeat")
    imp.add_argument("file", help="a file written by export, or - for stdin")
    imp.add_argument("--db", dest="db_path", help="SQLite file (default ./data/memory.db)")
    return parser


def client_url(config: Config, flag: str | None) -> str:
    return flag or config.nats_url or f"nats://127.0.0.1:{config.embedded_port}"


async def _request(
    config: Config, url: str, subject: str, body: bytes, timeout: float, render: Render
) -> int:
    from worker.bus import connect

    nc = await connect(url, config, reconnect=False)
    try:
        msg = await nc.request(subject, body, timeout=timeout)
    finally:
        await nc.close()
    failed = bool(msg.headers and msg.headers.get("Nats-Service-Error-Code"))
    text = msg.data.decode("utf-8", errors="replace").strip()
    sys.stdout.write((text if failed else render(text)) + "\n")
    return 1 if failed else 0


def _as_is(text: str) -> str:
    return text


def _fire(config: Config, args: argparse.Namespace) -> int:
    payload = sys.stdin.read() if args.payload == "-" else args.payload
    try:
        msgspec.json.decode(payload or "{}")
    except msgspec.DecodeError as error:
        print(f"memory-worker fire: the request is not JSON: {error}", file=sys.stderr)
        return 2
    if not args.trigger.startswith("memory::"):
        print("memory-worker fire: TRIGGER is a memory::… name", file=sys.stderr)
        return 2
    subject = config.subject_prefix + args.trigger.replace("::", ".")
    return _call(config, args, subject, payload.encode())


def _call(
    config: Config,
    args: argparse.Namespace,
    subject: str,
    body: bytes,
    render: Render = _as_is,
) -> int:
    import nats.errors

    from worker.bus import ConnectionFailed

    url = client_url(config, args.nats_url)
    shown = redact(url)  # the URL may carry a password or token: never print it
    try:
        return asyncio.run(_request(config, url, subject, body, args.timeout, render))
    except nats.errors.NoRespondersError:
        print(f"memory-worker: no memory worker answers on {shown}", file=sys.stderr)
    except (nats.errors.TimeoutError, TimeoutError):
        print(f"memory-worker: no reply within {args.timeout}s from {shown}", file=sys.stderr)
    except ConnectionFailed as error:
        print(f"memory-worker: {error}", file=sys.stderr)
    except (OSError, nats.errors.Error) as error:
        print(f"memory-worker: cannot reach NATS at {shown}: {redact(str(error))}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    flags = {key: getattr(args, key, None) for key in ("nats_url", "db_path")}
    try:
        config = load_config(os.environ, **(flags if args.command != "fire" else {}))
    except ConfigError as error:
        print(f"memory-worker: configuration error: {error}", file=sys.stderr)
        return 2
    configure_logging(config.log_level, config.log_format)
    if args.command == "run":
        from worker.app import run

        try:
            asyncio.run(run(config))
        except (DatabaseTooNew, RuntimeError, OSError) as error:
            print(f"memory-worker: {redact(str(error))}", file=sys.stderr)
            return 1
        return 0
    if args.command == "fire":
        return _fire(config, args)
    if args.command == "stats":
        from worker.stats_table import render

        def table(text: str) -> str:
            return text if args.json else render(msgspec.json.decode(text))

        subject = config.subject_prefix + "memory.stats"
        return _call(config, args, subject, b"{}", table)
    if args.command == "check":
        if _call(config, args, "$SRV.PING.memory", b"") == 2:
            return 1
        return 0
    if args.command == "backup":
        from worker.backup import backup_database

        pages = backup_database(config.db_path, args.path)
        print(f"backed up {config.db_path} to {args.path} ({pages} pages)", file=sys.stderr)
        return 0
    if args.command == "bench":
        from worker.bench import main as bench_main

        return bench_main(args)
    if args.command == "export":
        from worker.transfer import export_command

        return export_command(config, args)
    if args.command == "import":
        from worker.transfer import import_command

        return import_command(config, args)
    if args.command == "migrate":
        conn = open_db(config.db_path)
        try:
            print(f"schema version {migrate(conn)}: {config.db_path}")
        except DatabaseTooNew as error:
            print(f"memory-worker: {error}", file=sys.stderr)
            return 1
        finally:
            conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
