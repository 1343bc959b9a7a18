"""Export and import with tenants: an agent is a (tenant, agentId) pair in the file as in the
database, and files written before tenants existed are the default tenant ''."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from handlers.placing import content_hash
from tests.test_transfer import NOW, TABLES, dump, export_bytes, fill, lines_of, migrated
from worker.config import load_config
from worker.transfer.commands import (
    TransferError,
    export_command,
    export_jsonl,
    import_command,
    import_jsonl,
)

Rows = dict[str, list[tuple[Any, ...]]]


@pytest.fixture
def source(tmp_path: Path) -> apsw.Connection:
    """Agent `a` in the default tenant and in TEAM_A, with the same contents; `b` in TEAM_B."""
    conn = migrated(tmp_path / "source.db")
    fill(conn, "a")
    fill(conn, "a", "TEAM_A")
    fill(conn, "b", "TEAM_B")
    return conn


@pytest.fixture
def target(tmp_path: Path) -> apsw.Connection:
    return migrated(tmp_path / "target.db")


def of_tenant(rows: Rows, tenant: str) -> Rows:
    return {table: [row for row in found if row[0] == tenant] for table, found in rows.items()}


def tenant_export(conn: apsw.Connection, tenant: str, agent_id: str | None = None) -> bytes:
    out = io.BytesIO()
    export_jsonl(conn, out, agent_id=agent_id, now=NOW, tenant=tenant)
    return out.getvalue()


def without_ids(rows: Rows) -> Rows:
    """Rows with memory ids (new on a copy into another tenant of the same database) left out."""
    memories = sorted(row[:2] + row[3:] for row in rows["memories"])
    messages = [row[:3] + row[4:] for row in rows["session_messages"]]
    return {**rows, "memories": memories, "session_messages": messages}


def test_two_tenants_with_one_agent_id_export_and_import_apart(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """Agent `a` of '' and of TEAM_A hold the same contents: both come back, neither deduplicated
    into the other, each with its own sessions, entities and relations."""
    result = import_jsonl(target, lines_of(export_bytes(source)))
    assert dump(target) == dump(source)
    assert (result.memories_imported, result.sessions_written, result.entities_written) == (
        12,
        6,
        6,
    )
    assert (result.relations_added, result.memories_skipped) == (6, 0)
    for tenant in ("", "TEAM_A"):
        assert len(of_tenant(dump(target), tenant)["memories"]) == 4


def test_every_record_names_its_tenant_and_the_default_tenant_is_left_out(
    source: apsw.Connection,
) -> None:
    """Records of TEAM_A carry `"tenant": "TEAM_A"`; records of '' have no tenant key at all,
    which is the format of files written before tenants."""
    records = [msgspec.json.decode(line) for line in lines_of(export_bytes(source))][1:-1]
    tenants = [(record.get("tenant"), record["agentId"]) for record in records]
    assert tenants == [(None, "a")] * 10 + [("TEAM_A", "a")] * 10 + [("TEAM_B", "b")] * 10
    assert b'"tenant"' not in b"".join(lines_of(tenant_export(source, ""))[1:])


@pytest.mark.parametrize("tenant", ["", "TEAM_A"])
def test_a_tenant_export_holds_only_that_tenant(
    source: apsw.Connection, target: apsw.Connection, tenant: str
) -> None:
    """`export --tenant NAME` (or '' for the default tenant): the file says so in its header and
    the imported database holds that tenant's rows and no other."""
    data = tenant_export(source, tenant)
    assert msgspec.json.decode(lines_of(data)[0])["tenant"] == tenant
    import_jsonl(target, lines_of(data))
    assert dump(target) == of_tenant(dump(source), tenant)
    assert all(dump(target).values())


def test_agent_with_tenant_exports_that_agent_of_that_tenant_only(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """`--agent a --tenant TEAM_A` leaves out agent `a` of the default tenant."""
    import_jsonl(target, lines_of(tenant_export(source, "TEAM_A", "a")))
    assert dump(target) == of_tenant(dump(source), "TEAM_A")


def test_import_tenant_moves_a_default_tenant_export_into_an_account(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """`export --tenant '' | import --tenant TEAM_C`: every row lands in TEAM_C, unchanged
    otherwise (same ids: the target database does not hold them)."""
    import_jsonl(target, lines_of(tenant_export(source, "")), tenant="TEAM_C")
    moved = {
        table: [("TEAM_C", *row[1:]) for row in rows]
        for table, rows in of_tenant(dump(source), "").items()
    }
    assert dump(target) == moved


def test_a_copy_into_another_tenant_of_the_same_database_gets_new_memory_ids(
    source: apsw.Connection,
) -> None:
    """Memory ids are unique database-wide: copying agent `a` of '' into TEAM_C of the same
    database gives its memories new ids, its sessions follow them, the original is untouched,
    and a second copy changes nothing."""
    before = dump(source)
    data = lines_of(tenant_export(source, ""))
    result = import_jsonl(source, data, tenant="TEAM_C")
    assert (result.memories_imported, result.memories_skipped) == (4, 0)
    after = dump(source)
    assert of_tenant(after, "") == of_tenant(before, "")
    copy = of_tenant(after, "TEAM_C")
    original = {
        table: [("TEAM_C", *row[1:]) for row in rows]
        for table, rows in of_tenant(before, "").items()
    }
    assert without_ids(copy) == without_ids(original)
    new_ids = {row[2] for row in copy["memories"]}
    assert new_ids.isdisjoint(row[2] for row in before["memories"])
    refs = [row[3] for row in copy["session_messages"]]
    assert [ref for ref in refs if ref in new_ids] == refs[:3]  # s1's two and s2's first
    assert refs[3:] == [None, "gone"]  # what pointed nowhere still does
    again = import_jsonl(source, data, tenant="TEAM_C")
    assert (again.memories_imported, again.sessions_written) == (0, 0)
    assert dump(source) == after


OLD_FILE = [
    b'{"kind":"header","format":"memory-worker-export","version":1,"schemaVersion":1,'
    b'"exportedAt":1795000000000,"agent":null}',
    b'{"kind":"memory","id":"m1","agentId":"a","role":"user","content":"old","hash":"'
    + content_hash("old").encode()
    + b'","sessionId":"s1","importance":0.5,"confidence":1.0,"accessCount":0,'
    b'"lastAccessed":1,"timestamp":1,"metadata":null,"embedding":null,'
    b'"embeddingModel":null,"createdAt":1}',
    b'{"kind":"session","agentId":"a","id":"s1","createdAt":1,"updatedAt":1,'
    b'"compactedAt":null,"repairedAt":null,"messages":[{"id":"m1","role":"user","timestamp":1}]}',
    b'{"kind":"entity","agentId":"a","id":"alice","type":null,"properties":{}}',
    b'{"kind":"relation","agentId":"a","source":"alice","type":"knows","target":"bob"}',
    b'{"kind":"end","records":4}',
]


def test_a_file_written_before_tenants_imports_into_the_default_tenant(
    target: apsw.Connection,
) -> None:
    """A file of the format before tenants (no tenant keys, schema version 1) imports as is,
    every row in tenant ''."""
    import_jsonl(target, OLD_FILE)
    assert dump(target) == {
        "memories": [
            ("", "a", "m1", "user", "old", content_hash("old"), "s1", 0.5, 1.0, 0, 1, 1,
             None, None, None, 1, 0, None, None, "note", "internal", "auto", None, None),
        ],
        "sessions": [("", "a", "s1", 1, 1, None, None)],
        "session_messages": [("", "a", "s1", "m1", "user", 1, None)],
        "kg_entities": [("", "a", "alice", None, "{}")],
        "kg_relations": [("", "a", "alice", "knows", "bob")],
    }  # fmt: skip


@pytest.mark.parametrize("bad", ["TEAM.A", "TEAM A", "*", "x>", "a\x00b", "x" * 257])
def test_a_bad_import_tenant_is_refused_naming_the_flag_and_nothing_is_written(
    source: apsw.Connection, target: apsw.Connection, bad: str
) -> None:
    """`import --tenant` must be a NATS account name: otherwise refused before any row."""
    with pytest.raises(TransferError, match=r"^--tenant: .* is not a tenant name"):
        import_jsonl(target, lines_of(export_bytes(source)), tenant=bad)
    assert dump(target) == {table: [] for table in TABLES}


def test_a_bad_tenant_in_a_record_is_refused_naming_the_line_and_field(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """A record whose tenant is not an account name refuses the whole file."""
    lines = lines_of(export_bytes(source))
    lines[25] = lines[25].replace(b'"tenant":"TEAM_B"', b'"tenant":"TEAM.B"')
    with pytest.raises(
        TransferError, match=r"line 26: Expected `str` matching regex .* `\$.tenant`"
    ):
        import_jsonl(target, lines)
    assert dump(target) == {table: [] for table in TABLES}


def test_a_tenant_export_refuses_another_tenants_record(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """A file that says it holds TEAM_A and carries a row of TEAM_B was edited: refused."""
    lines = lines_of(tenant_export(source, "TEAM_A"))
    lines[1] = lines[1].replace(b'"tenant":"TEAM_A"', b'"tenant":"TEAM_B"')
    message = r"line 2: tenant 'TEAM_B' in an export of tenant 'TEAM_A' - at `\$.tenant`"
    with pytest.raises(TransferError, match=message):
        import_jsonl(target, lines)


def test_the_commands_take_tenant_and_refuse_a_bad_one_creating_nothing(
    source: apsw.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export --tenant TEAM_A` then `import --tenant TEAM_C` through the CLI functions; a bad
    --tenant exits 1 with one line naming the flag, and neither creates a file."""
    exported = tmp_path / "team.jsonl"
    config = load_config({}, db_path=str(tmp_path / "source.db"))
    args = argparse.Namespace(agent=None, tenant="TEAM_A", output=str(exported))
    assert export_command(config, args) == 0
    assert "(all agents of tenant 'TEAM_A')" in capsys.readouterr().err
    copy = load_config({}, db_path=str(tmp_path / "copy.db"))
    assert import_command(copy, argparse.Namespace(file=str(exported), tenant="TEAM_C")) == 0
    rows = dump(migrated(tmp_path / "copy.db"))
    assert {row[:2] for found in rows.values() for row in found} == {("TEAM_C", "a")}

    bad = load_config({}, db_path=str(tmp_path / "bad.db"))
    capsys.readouterr()
    assert import_command(bad, argparse.Namespace(file=str(exported), tenant="TEAM.C")) == 1
    args = argparse.Namespace(agent=None, tenant="TEAM.C", output=str(tmp_path / "bad.jsonl"))
    assert export_command(config, args) == 1
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(":")[:2] for line in errors] == [
        ["memory-worker import", " --tenant"],
        ["memory-worker export", " --tenant"],
    ]
    assert not (tmp_path / "bad.db").exists() and not (tmp_path / "bad.jsonl").exists()
