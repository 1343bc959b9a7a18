"""A toy write trigger made here costs its structs, a pure handler and one row, and with no other
edit is sent by the typed client, exported, imported and publishable in `memory-worker
nats-config`'s output, and taken once from durable ingestion."""

from __future__ import annotations

from pathlib import Path

import apsw

from handlers.audit import Change
from handlers.ingested import Delivery
from schema.base import AgentId, Reply, TriggerRequest, tenant_of
from tests.conftest import worker_config
from tests.support import wait_until
from worker.app import App
from worker.client import MemoryClient
from worker.nats_config import EXAMPLE, nats_config
from worker.registry import ROUTES
from worker.route import Route
from worker.writes import requested

CLIENT = worker_config("", Path("unused.db"))  # no credentials, no prefix


class TallyRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    by: int = 1


class TallyReply(Reply, frozen=True):
    total: int


def tally(conn: apsw.Connection, req: TallyRequest, *, now: int) -> TallyReply:
    """Adds `by` to the agent's toy total, kept as a key-value row."""
    agent = (tenant_of(req), req.agent_id)
    conn.execute(
        "INSERT INTO kv (tenant, agent_id, key, value, version, updated_at) "
        "VALUES (?, ?, 'toy', CAST(? AS TEXT), 1, ?) ON CONFLICT (tenant, agent_id, key) DO "
        "UPDATE SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT), version = version + 1",
        (*agent, req.by, now, req.by),
    )
    [(total,)] = conn.execute(
        "SELECT CAST(value AS INTEGER) FROM kv WHERE tenant = ? AND agent_id = ? AND key = 'toy'",
        agent,
    ).fetchall()
    return TallyReply(total=int(str(total)))


# The toy trigger's whole cost beyond its structs and its handler: this row.
TALLY = Route(
    "memory::toy::tally",
    TallyRequest,
    reply_type=TallyReply,
    write=requested(
        TallyRequest, tally, lambda req, reply: [Change((tenant_of(req), req.agent_id), count=1)]
    ),
    ingest=True,
)


def toy_total(db: Path) -> int:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        found = conn.execute("SELECT CAST(value AS INTEGER) FROM kv WHERE key = 'toy'").fetchall()
        return int(str(found[0][0])) if found else 0
    finally:
        conn.close()


async def test_a_toy_write_row_is_reachable_from_the_client_nats_config_and_ingestion(
    nats_url: str, tmp_path: Path
) -> None:
    """A write trigger made in this test (its structs, a pure handler, one row) is exported,
    imported and publishable in `nats-config`'s output, sent by the typed client to a worker
    serving the table with that row, taken from durable ingestion, and applied once however
    often its message is delivered."""
    routes = (*ROUTES, TALLY)
    config = nats_config(routes, EXAMPLE)
    assert '      { service: "memory.toy.tally" }\n' in config
    imported = '{ service: { account: MEMORY, subject: "memory.toy.tally" }, share: true }'
    assert config.count(imported) == len(EXAMPLE)
    publish = config[config.index("TENANT_PUBLISH") : config.index("jetstream")]
    assert '"memory.toy.tally",' in publish
    db = tmp_path / "memory.db"
    app = App(worker_config(nats_url, db), routes=routes)
    await app.start()
    try:
        async with await MemoryClient.connect(nats_url, config=CLIENT) as memory:
            assert await memory.send(TALLY, TallyRequest(agent_id="a", by=2)) == TallyReply(total=2)
            js = memory.nc.jetstream()
            await js.publish(TALLY.ingest_subject(), b'{"agentId": "a", "by": 3}')
            await wait_until(lambda: toy_total(db) == 5, "the ingested tally applied")
        assert app.dispatcher is not None
        message = Delivery("MEMORY_INGEST@1", 1_000, 0)
        body = b'{"agentId": "a", "by": 7}'
        first = await app.dispatcher.handle(TALLY.trigger, body, source="ingest", message=message)
        again = await app.dispatcher.handle(TALLY.trigger, body, source="ingest", message=message)
        assert first.error is None and again.error is not None
        assert again.error.code == "already_applied" and toy_total(db) == 12
    finally:
        await app.stop()
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        sources = [str(s) for (s,) in conn.execute("SELECT source FROM audit ORDER BY seq")]
    finally:
        conn.close()
    assert sources == ["bus", "ingest", "ingest"]
