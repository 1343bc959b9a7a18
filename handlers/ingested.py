"""The keys of ingested messages already applied: what makes ingestion exactly once.

A message of a durable-ingestion stream is acknowledged after its write commits; a crash between
the two redelivers it. Its write therefore records the message's key (stream and sequence) in
its own transaction, and a write that finds its key recorded was applied already: it is refused
as `Repeated` and changes nothing (worker/writes.py), and ingestion acknowledges the message.
"""

from __future__ import annotations

import apsw
import msgspec


class Delivery(msgspec.Struct, frozen=True, array_like=True):
    """Which message a write belongs to: its stream (`name@created`, so that a stream deleted
    and made again is another), its sequence there, and the consumer's ack floor when it was
    delivered (every message at or below it is acknowledged: never delivered again)."""

    stream: str
    seq: int
    floor: int


class IngestKey(msgspec.Struct, frozen=True, array_like=True):
    """A delivery as the write records it, under the agent whose partition the write is in."""

    tenant: str
    agent_id: str
    delivery: Delivery


def applied(conn: apsw.Connection, delivery: Delivery) -> bool:
    row = conn.execute(
        "SELECT 1 FROM ingested WHERE stream = ? AND seq = ?", (delivery.stream, delivery.seq)
    ).fetchone()
    return row is not None


def remember(conn: apsw.Connection, key: IngestKey, at: int) -> None:
    """Record the key, and drop the stream's keys that no delivery can ask about any more."""
    delivery = key.delivery
    conn.execute(
        "DELETE FROM ingested WHERE stream = ? AND seq <= ?", (delivery.stream, delivery.floor)
    )
    conn.execute(
        "INSERT INTO ingested (stream, seq, tenant, agent_id, at) VALUES (?, ?, ?, ?, ?)",
        (delivery.stream, delivery.seq, key.tenant, key.agent_id, at),
    )


def purge_keys(conn: apsw.Connection, before: int, scope: str, params: tuple[str, ...]) -> int:
    """Keys recorded before `before` within an eviction's scope (handlers/evict.py scope_of):
    those of a stream deleted before its floor passed them. How many."""
    conn.execute(f"DELETE FROM ingested WHERE at < ?{scope}", (before, *params))
    return conn.changes()
