"""The short-lived commands that talk to a running worker (fire, stats, check), the checks
before `mcp` serves, and `token`, which makes a bearer token for it.

Each is one connection and one request through the Python client (worker/client.py), both
inside the command's --timeout, and each way of failing has its own exit code, so that a script
can tell "retry later" (no worker yet, NATS down) from "fix the command" (usage, a request the
server will never take).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from enum import IntEnum
from typing import TypeVar

import msgspec

from schema.errors import WorkerError, error_reply
from worker.client import MemoryClient, default_url
from worker.client_errors import BadReply, ClientError, NoWorker, RequestTooLarge
from worker.config import Config
from worker.redact import redact

T = TypeVar("T")
Render = Callable[[str], str]


class Exit(IntEnum):
    OK = 0
    ERROR_REPLY = 1  # the worker answered with an error; for check: it answers but is unhealthy
    NO_WORKER = 2  # NATS is up but no memory worker answered within --timeout
    UNREACHABLE = 3  # no connection to NATS within --timeout (refused, TLS, credentials)
    TOO_LARGE = 4  # the request is larger than the server's max_payload
    USAGE = 64  # EX_USAGE: bad arguments, unknown trigger, payload not JSON, bad --nats-url
    CONFIG = 78  # EX_CONFIG: a MEMORY_WORKER_* variable is unusable


EXIT_CODES = f"""exit codes:
  {Exit.OK:<3} the reply was a success (check: a worker answers and is healthy)
  {Exit.ERROR_REPLY:<3} the worker replied with an error (check: its database is corrupt)
  {Exit.NO_WORKER:<3} NATS is up but no memory worker answered within --timeout
  {Exit.UNREACHABLE:<3} cannot reach NATS within --timeout (refused, TLS, credentials)
  {Exit.TOO_LARGE:<3} the request is larger than the NATS server's max_payload
  {Exit.USAGE:<3} usage: bad arguments, unknown trigger, payload not JSON, bad --nats-url
  {Exit.CONFIG:<3} a MEMORY_WORKER_* variable is unusable"""


def client_url(config: Config, flag: str | None) -> str:
    return flag or default_url(config)


def call(
    config: Config,
    url: str,
    timeout: float,
    ask: Callable[[MemoryClient, float], Awaitable[T]],
    inbox_prefix: str | None = None,
) -> T | WorkerError | Exit:
    """What `ask` returns from a client connected to url, the worker's refusal, or the exit
    code after a line on stderr saying why there is no reply. Connecting and waiting for the
    reply share the one timeout: `ask` is given the seconds left. `inbox_prefix`: a tenant's
    user's private inbox (`--inbox-prefix`), the only one the shipped NATS configuration lets
    it subscribe to for its replies."""

    async def run() -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with await MemoryClient.connect(
            url, config=config, timeout=timeout, inbox_prefix=inbox_prefix
        ) as client:
            return await ask(client, max(deadline - loop.time(), 0.001))

    try:
        return asyncio.run(run())
    except WorkerError as error:
        return error
    except ClientError as error:
        print(f"memory-worker: {error}", file=sys.stderr)
        if isinstance(error, RequestTooLarge):
            return Exit.TOO_LARGE
        if isinstance(error, BadReply):  # something answered, but not as a worker does
            return Exit.ERROR_REPLY
        return Exit.NO_WORKER if isinstance(error, NoWorker) else Exit.UNREACHABLE


def _print_reply(answer: bytes | WorkerError | Exit, render: Render) -> Exit:
    if isinstance(answer, Exit):
        return answer
    if isinstance(answer, WorkerError):
        sys.stdout.write(msgspec.json.encode(error_reply(answer)).decode() + "\n")
        return Exit.ERROR_REPLY
    sys.stdout.write(render(answer.decode("utf-8", errors="replace").strip()) + "\n")
    return Exit.OK


def not_json(body: bytes) -> str | None:
    """Why body is not JSON text, or None. Only the syntax is checked here: what the worker
    refuses in valid JSON (invalid UTF-8, a lone surrogate, nesting too deep, a NaN) it refuses
    itself, naming the field, so `fire` sends it and prints that reply."""
    text = body.decode("utf-8", "surrogateescape")
    if not text.strip():
        return None  # an empty request is `{}`
    try:
        json.loads(text)
    except RecursionError:
        return None
    except json.JSONDecodeError as error:
        return str(error)
    return None


def trigger_named(text: str, prefix: str = "") -> str:
    """The trigger a name stands for: `memory::kg::add` as is, or its subject `memory.kg.add`
    (with or without the configured subject prefix), which is what a reader of the NATS side
    (`nats sub`, `$SRV.INFO`, a log line) has at hand."""
    if "::" in text:
        return text
    if prefix and text.startswith(prefix):
        text = text.removeprefix(prefix)
    return text.replace(".", "::")


def unknown_trigger(given: str, trigger: str, known: Iterable[str]) -> str:
    """One line for a name (`given`, read as `trigger`) that is no trigger: the closest real
    one first, when one is close (a typo), then all of them."""
    names = sorted(known)
    close = difflib.get_close_matches(trigger, names, n=1, cutoff=0.75)
    guess = f"; did you mean {close[0]}?" if close else "."
    return f"unknown trigger {given!r}{guess} The triggers: {', '.join(names)}"


def fire(config: Config, args: argparse.Namespace) -> Exit:
    from worker.registry import BY_TRIGGER

    trigger = trigger_named(args.trigger, config.subject_prefix)
    if trigger not in BY_TRIGGER:
        unknown = unknown_trigger(args.trigger, trigger, BY_TRIGGER)
        print(f"memory-worker fire: {unknown}", file=sys.stderr)
        return Exit.USAGE
    body = (
        sys.stdin.buffer.read()
        if args.payload == "-"
        else args.payload.encode("utf-8", "surrogateescape")  # argv as the shell gave it
    )
    problem = not_json(body)
    if problem is not None:
        print(f"memory-worker fire: the request is not JSON: {problem}", file=sys.stderr)
        return Exit.USAGE
    url = client_url(config, args.nats_url)
    answer = call(
        config,
        url,
        args.timeout,
        lambda client, left: client.request(trigger, body, timeout=left),
        args.inbox_prefix,
    )
    return _print_reply(answer, lambda text: text)


def cluster(config: Config, args: argparse.Namespace) -> Exit:
    """The sharded deployment as the lease bucket and the partition streams show it."""
    from worker.shards.status import NotSharded, cluster_status, render

    url = client_url(config, args.nats_url)
    try:
        status = call(
            config,
            url,
            args.timeout,
            lambda client, left: asyncio.wait_for(cluster_status(client.nc, config.standbys), left),
        )
    except NotSharded as error:
        print(f"memory-worker cluster: {error}", file=sys.stderr)
        return Exit.NO_WORKER
    except TimeoutError:
        print(f"memory-worker cluster: no answer within {args.timeout:g}s", file=sys.stderr)
        return Exit.NO_WORKER
    if isinstance(status, Exit):
        return status
    if isinstance(status, WorkerError):
        return _print_reply(status, lambda text: text)
    shown = msgspec.json.encode(status).decode() if args.json else render(status)
    sys.stdout.write(shown + "\n")
    return Exit.OK


def stats(config: Config, args: argparse.Namespace) -> Exit:
    from worker.stats_table import render

    def table(text: str) -> str:
        return text if args.json else render(msgspec.json.decode(text))

    url = client_url(config, args.nats_url)
    body = b"{}" if args.tenant is None else json.dumps({"tenant": args.tenant}).encode()
    answer = call(
        config,
        url,
        args.timeout,
        lambda client, left: client.request("memory::stats", body, timeout=left),
        args.inbox_prefix,
    )
    return _print_reply(answer, table)


def check(config: Config, args: argparse.Namespace) -> Exit:
    """nats.micro answers PING by itself, so an answer alone says only that the process is up;
    the worker puts its health in the service metadata that every PING reply carries."""
    url = client_url(config, args.nats_url)
    answer = call(
        config, url, args.timeout, lambda client, left: client.ping(timeout=left), args.inbox_prefix
    )
    if isinstance(answer, Exit):
        return answer
    if isinstance(answer, WorkerError):  # nats.micro never refuses a PING
        print(f"memory-worker check: {answer.status}: {answer.message}", file=sys.stderr)
        return Exit.ERROR_REPLY
    sys.stdout.write(msgspec.json.encode(answer).decode() + "\n")
    metadata = answer.metadata or {}
    health = metadata.get("health", "ok")
    if health != "ok":
        reason = metadata.get("reason", "")
        print(
            f"memory-worker check: the worker at {redact(url)} answers but is unhealthy: "
            f"database {health}: {reason}",
            file=sys.stderr,
        )
        return Exit.ERROR_REPLY
    return Exit.OK


def mcp(config: Config, args: argparse.Namespace) -> Exit:
    """Check the agent options, then serve (worker/mcp_server.py) until the client leaves."""
    import msgspec

    from schema.base import AgentId

    if args.http is None and (args.agent is None or args.agent_header is not None):
        print("memory-worker mcp: give --agent (--agent-header is for --http)", file=sys.stderr)
        return Exit.USAGE
    if (args.agent is None) == (args.agent_header is None):
        print("memory-worker mcp: give one of --agent and --agent-header", file=sys.stderr)
        return Exit.USAGE
    if args.agent is not None:
        try:
            msgspec.convert(args.agent, AgentId)
        except msgspec.ValidationError as error:
            print(f"memory-worker mcp: --agent: {error}", file=sys.stderr)
            return Exit.USAGE
    from worker.mcp_http import TOKENS_VARIABLE, start_problem
    from worker.mcp_server import serve
    from worker.tokens import TokenFileError, tokens_from_env

    tokens = None
    if args.http is not None:  # stdio needs no token: its caller owns the process
        try:
            tokens = tokens_from_env(TOKENS_VARIABLE, os.environ)
        except TokenFileError as error:
            print(f"memory-worker mcp: {error}", file=sys.stderr)
            return Exit.CONFIG
        if problem := start_problem(args, tokens):
            print(f"memory-worker mcp: {problem}", file=sys.stderr)
            return Exit.CONFIG
    serve(config, args, client_url(config, args.nats_url), tokens)
    return Exit.OK


def token(args: argparse.Namespace) -> Exit:
    """A fresh bearer token, printed once on stdout's first line for the person to hand to a
    client; the file keeps only its hash (worker/tokens.py)."""
    from worker.tokens import TokenFileError, add_entry, entry, new_token

    if not args.name or not all(args.agents):
        print(
            "memory-worker token: --name and each --agents pattern must not be empty",
            file=sys.stderr,
        )
        return Exit.USAGE
    secret = new_token()
    if args.file is None:
        sys.stdout.write(f"{secret}\n{json.dumps({args.name: entry(secret, args.agents)})}\n")
        where = (
            "the second line is its entry: add it to the file MEMORY_WORKER_MCP_TOKENS (or "
            "MEMORY_WORKER_UI_TOKENS, for the browser) names"
        )
    else:
        try:
            add_entry(args.file, args.name, secret, args.agents)
        except TokenFileError as error:
            print(f"memory-worker token: {error}", file=sys.stderr)
            return Exit.CONFIG
        except OSError as error:
            print(
                f"memory-worker token: cannot write {args.file}: {error.strerror}", file=sys.stderr
            )
            return Exit.CONFIG
        except KeyError:
            print(
                f"memory-worker token: {args.file} already has a token named {args.name!r}",
                file=sys.stderr,
            )
            return Exit.USAGE
        sys.stdout.write(f"{secret}\n")
        where = f"its SHA-256 is now in {args.file}"
    print(
        "memory-worker token: the first line is the token, shown only now: give it to the client, "
        f"which sends `Authorization: Bearer <token>`; {where}",
        file=sys.stderr,
    )
    return Exit.OK
