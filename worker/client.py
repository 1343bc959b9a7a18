"""The short-lived commands that talk to a running worker: fire, stats, check.

Each is one connection and one request, both inside the command's --timeout, and each way of
failing has its own exit code, so that a script can tell "retry later" (no worker yet, NATS
down) from "fix the command" (usage, a request the server will never take).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import msgspec

from worker.config import Config
from worker.outgoing import error_reply
from worker.redact import redact

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


@dataclass(frozen=True)
class Answer:
    data: bytes
    failed: bool


class TooLarge(Exception):
    pass


def client_url(config: Config, flag: str | None) -> str:
    return flag or config.nats_url or f"nats://127.0.0.1:{config.embedded_port}"


async def _request(config: Config, url: str, subject: str, body: bytes, timeout: float) -> Answer:
    """Connecting and waiting for the reply share the one timeout."""
    import nats.errors

    from worker.bus import connect

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    nc = await connect(url, config, reconnect=False, timeout=timeout)
    try:
        left = max(deadline - loop.time(), 0.001)
        msg = await nc.request(subject, body, timeout=left)
    except nats.errors.MaxPayloadError:
        raise TooLarge(
            f"the request is {len(body)} bytes, more than the NATS server at {redact(url)} accepts "
            f"(max_payload {nc.max_payload} bytes)"
        ) from None
    finally:
        await nc.close()
    return Answer(msg.data, error_reply(msg) is not None)


def call(config: Config, url: str, subject: str, body: bytes, timeout: float) -> Answer | Exit:
    """The reply, or the exit code after a line on stderr saying why there is none."""
    import nats.errors

    from worker.bus import ConnectionFailed

    shown = redact(url)  # the URL may carry a password or token: never print it
    try:
        return asyncio.run(_request(config, url, subject, body, timeout))
    except TooLarge as error:
        print(f"memory-worker: {error}", file=sys.stderr)
        return Exit.TOO_LARGE
    except nats.errors.NoRespondersError:
        print(f"memory-worker: no memory worker answers on {shown}", file=sys.stderr)
        return Exit.NO_WORKER
    except (nats.errors.TimeoutError, TimeoutError):
        print(f"memory-worker: no reply within {timeout:g}s from {shown}", file=sys.stderr)
        return Exit.NO_WORKER
    except ConnectionFailed as error:
        print(f"memory-worker: {redact(str(error))}", file=sys.stderr)
    except (OSError, nats.errors.Error) as error:
        reason = redact(str(error))
        print(f"memory-worker: lost the connection to NATS at {shown}: {reason}", file=sys.stderr)
    return Exit.UNREACHABLE


def _print_reply(answer: Answer, render: Render) -> Exit:
    text = answer.data.decode("utf-8", errors="replace").strip()
    sys.stdout.write((text if answer.failed else render(text)) + "\n")
    return Exit.ERROR_REPLY if answer.failed else Exit.OK


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


def fire(config: Config, args: argparse.Namespace) -> Exit:
    from worker.registry import BY_TRIGGER

    if args.trigger not in BY_TRIGGER:
        known = ", ".join(sorted(BY_TRIGGER))
        print(
            f"memory-worker fire: unknown trigger {args.trigger!r}; one of {known}", file=sys.stderr
        )
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
    subject = BY_TRIGGER[args.trigger].subject(config.subject_prefix)
    url = client_url(config, args.nats_url)
    answer = call(config, url, subject, body, args.timeout)
    return answer if isinstance(answer, Exit) else _print_reply(answer, lambda text: text)


def stats(config: Config, args: argparse.Namespace) -> Exit:
    from worker.stats_table import render

    def table(text: str) -> str:
        return text if args.json else render(msgspec.json.decode(text))

    url = client_url(config, args.nats_url)
    body = b"{}" if args.tenant is None else json.dumps({"tenant": args.tenant}).encode()
    answer = call(config, url, config.subject_prefix + "memory.stats", body, args.timeout)
    return answer if isinstance(answer, Exit) else _print_reply(answer, table)


def check(config: Config, args: argparse.Namespace) -> Exit:
    """nats.micro answers PING by itself, so an answer alone says only that the process is up;
    the worker puts its health in the service metadata that every PING reply carries."""
    url = client_url(config, args.nats_url)
    answer = call(config, url, "$SRV.PING.memory", b"", args.timeout)
    if isinstance(answer, Exit):
        return answer
    sys.stdout.write(answer.data.decode("utf-8", errors="replace").strip() + "\n")
    try:
        ping: Any = msgspec.json.decode(answer.data)
        metadata = ping.get("metadata") or {}
    except (msgspec.DecodeError, AttributeError):
        metadata = {}
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
