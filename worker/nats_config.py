"""`memory-worker nats-config`: the NATS server configuration for a worker with tenants, made
from the trigger table, so that a new trigger is exported, imported and publishable with no
edit of its own. deploy/nats/nats-server.conf is this output for the example tenants
(tests/test_deploy.py keeps them equal).

The worker's account (MEMORY) exports each trigger subject as a service (never `memory.>`, so
dead letters and partition subjects stay out of reach) and `memory.ingest.*.>` with the
importer's account as its third token; each tenant account imports every trigger with
`share: true` (the worker learns the caller's user from `Nats-Request-Info`) and its own ingest
subjects as `memory.ingest.>`.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from worker.route import Route

HEADER = (
    "A NATS server for memory-worker: JetStream for durable ingestion, and one account per "
    "tenant. Made by `memory-worker nats-config` from the worker's trigger table: run it again "
    "rather than edit this by hand (`--tenant ACCOUNT=user,...` for each tenant of yours).",
    "MEMORY holds the worker and operators alone: a request from inside it is administrative. "
    "Every other account is a tenant (here {accounts}). Each imports the trigger subjects with "
    "`share: true`, so that every request reaches the worker with the server's "
    "`Nats-Request-Info` header naming the caller's account and user (the server replaces any "
    "such header a client sends). Run the worker with MEMORY_WORKER_TENANCY=account.",
    "Durable ingestion: each tenant imports `memory.ingest.<its name>.>` as `memory.ingest.>`, "
    "so its publish on `memory.ingest.store` reaches the worker's account as "
    "`memory.ingest.<its name>.store`. The worker keeps each tenant's messages in a stream of "
    "its own (MEMORY_INGEST_<tenant>, made at the tenant's first publish), so a tenant's "
    "Nats-Msg-Id and acknowledgement sequences are its own; nothing per tenant is configured "
    "for it here.",
    "Passwords come from the environment: WORKER_PASSWORD, OPERATOR_PASSWORD, and one per "
    "tenant user ({passwords}). deploy/README.md shows how to add a tenant or a user.",
)

SERVER = """\
port: 4222
http_port: 8222
"""

JETSTREAM = """\
jetstream {
  store_dir: "/data"
  # Sync every write: an acknowledged ingest publish then survives a power loss too.
  sync_interval: always
}
"""

MEMORY_USERS = """\
    users: [
      {
        user: worker
        password: $WORKER_PASSWORD
        permissions: {
          # Serve every trigger and the service protocol; answer on inboxes.
          subscribe: { allow: ["memory.>", "$SRV.>", "_INBOX.>"] }
          publish: {
            allow: [
              "_INBOX.>",
              "$SRV.>",
              "embedding.generate",
              "llm.complete",
              "memory.deadletter.>",
              # A tenant's first ingest publish, put into the stream made for it.
              "memory.ingest.>",
              "$JS.API.>",
              # Acknowledgements on every tenant's stream (MEMORY_INGEST_<tenant>).
              "$JS.ACK.>",
            ]
          }
          allow_responses: true
        }
      }
      {
        # Administrative requests (they name `tenant`), the CLI, and ingests for any tenant
        # on memory.ingest.<tenant>.store. Never a client of agents: it acts on every tenant.
        user: operator
        password: $OPERATOR_PASSWORD
        permissions: {
          publish: { allow: ["memory.>", "$SRV.>", "$JS.API.>"], deny: ["memory.deadletter.>"] }
          subscribe: { allow: ["_INBOX.>"], deny: ["memory.>"] }
        }
      }
    ]
"""
# A NATS account or user name as this file may hold it unquoted.
NAME = re.compile(r"\A[A-Za-z][A-Za-z0-9_-]*\Z")


@dataclass(frozen=True)
class Tenant:
    """A tenant's account and the users in it."""

    account: str
    users: tuple[str, ...]


EXAMPLE = (Tenant("TEAM_A", ("alice", "bob")), Tenant("TEAM_B", ("carol",)))


def nats_config(routes: Iterable[Route[Any, Any]], tenants: Sequence[Tenant] = EXAMPLE) -> str:
    """The whole file: server, what tenants may publish, JetStream, and the accounts."""
    subjects = [route.subject() for route in routes]
    publish = _wrapped([*(f'"{s}"' for s in subjects), '"memory.ingest.>"'], indent=4)
    accounts = [
        _memory_account(subjects),
        *(_tenant_account(tenant, subjects, first=n == 0) for n, tenant in enumerate(tenants)),
    ]
    return (
        _header(tenants)
        + SERVER
        + "\n# What a tenant's user may publish: the trigger subjects and its own ingest"
        + " subjects.\n"
        + f"TENANT_PUBLISH: {{\n  allow: [\n{publish}\n  ]\n}}\n\n"
        + JETSTREAM
        + "\naccounts {\n"
        + "\n".join(accounts)
        + "}\n"
    )


def _header(tenants: Sequence[Tenant]) -> str:
    words = {
        "accounts": " and ".join(tenant.account for tenant in tenants),
        "passwords": ", ".join(f"{u.upper()}_PASSWORD" for t in tenants for u in t.users),
    }
    return "\n#\n".join(_comment(paragraph.format(**words)) for paragraph in HEADER) + "\n"


def _comment(text: str) -> str:
    """A paragraph as `# ` lines of at most 96 characters, never broken inside `code`."""
    kept = re.sub(r"`[^`]*`", lambda code: code.group().replace(" ", "\0"), text)
    lines = textwrap.wrap(kept, width=94, break_on_hyphens=False, break_long_words=False)
    return "\n".join(f"# {line}".replace("\0", " ") for line in lines)


def _memory_account(subjects: list[str]) -> str:
    exports = "\n".join(f'      {{ service: "{subject}" }}' for subject in subjects)
    return f"""\
  MEMORY {{
    jetstream: enabled
{MEMORY_USERS.rstrip()}
    # One export per trigger subject, never `memory.>`: dead letters stay out of reach.
    exports: [
{exports}
      # The third token must be the importing account's name: a tenant can import only its
      # own ingest subjects, so the stream's subject names the tenant and nobody can forge it.
      {{ service: "memory.ingest.*.>", account_token_position: 3 }}
    ]
  }}
"""


def _tenant_account(tenant: Tenant, subjects: list[str], *, first: bool) -> str:
    users = "\n".join(_user(user, first=first and n == 0) for n, user in enumerate(tenant.users))
    imports = "\n".join(
        f'      {{ service: {{ account: MEMORY, subject: "{subject}" }}, share: true }}'
        for subject in subjects
    )
    comment = (
        f"      # Publish on memory.ingest.store; the stream holds memory.ingest.{tenant.account}"
        ".store.\n"
        if first
        else ""
    )
    return f"""\
  {tenant.account} {{
    users: [
{users}
    ]
    imports: [
{imports}
{comment}      {{ service: {{ account: MEMORY, subject: "memory.ingest.{tenant.account}.>" }}, \
to: "memory.ingest.>" }}
    ]
  }}
"""


def _user(user: str, *, first: bool) -> str:
    comment = (
        "        # A private inbox prefix: connect with inbox_prefix "
        f'"_INBOX_{user}" (nats-py) or\n'
        "        # CustomInboxPrefix (Go). Nobody else may subscribe to it, and nobody to "
        "`_INBOX.>`.\n"
        if first
        else ""
    )
    return f"""\
      {{
        user: {user}
        password: ${user.upper()}_PASSWORD
{comment}        permissions: {{
          publish: $TENANT_PUBLISH
          subscribe: {{ allow: ["_INBOX_{user}.>"], deny: ["_INBOX.>"] }}
        }}
      }}"""


def _wrapped(items: list[str], *, indent: int, width: int = 100) -> str:
    """Comma-separated items, as many to a line as fit within width."""
    lines: list[str] = []
    line = ""
    for item in items:
        word = f"{item},"
        if line and indent + len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(" " * indent + line for line in lines)


def tenant_arg(text: str) -> Tenant:
    """`TEAM_A=alice,bob`: an account and its users (argparse's type for --tenant)."""
    account, _, users = text.partition("=")
    names = tuple(user for user in users.split(",") if user)
    for name in (account, *names):
        if not NAME.match(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} in {text!r}: an account or user is a letter, then letters, digits, "
                "_ or -"
            )
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give the account's users, ACCOUNT=user,...")
    return Tenant(account, names)


def command(args: argparse.Namespace) -> int:
    """Print the configuration for the tenants given (the examples without any)."""
    from worker.registry import ROUTES

    tenants: list[Tenant] = args.tenant or list(EXAMPLE)
    names = [
        *(tenant.account.upper() for tenant in tenants),
        *(user.upper() for tenant in tenants for user in tenant.users),  # <USER>_PASSWORD
    ]
    clashes = {name for name in names if names.count(name) > 1} | (
        {"MEMORY", "WORKER", "OPERATOR"} & set(names)
    )
    if clashes:
        print(
            f"memory-worker nats-config: {', '.join(sorted(clashes))}: named twice (letter case "
            "aside), or the MEMORY account's own",
            file=sys.stderr,
        )
        return 64
    sys.stdout.write(nats_config(ROUTES, tenants))
    return 0
