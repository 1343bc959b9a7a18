"""Moving agents between databases: `memory-worker export` and `memory-worker import`."""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
from pathlib import Path
from typing import Any

import apsw
import msgspec
import nats
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handlers.placing import content_hash
from handlers.store import insert_memory
from tests.conftest import worker_config
from tests.support import Client
from worker.app import App
from worker.config import load_config
from worker.db import migrate, migrations, open_db
from worker.transfer.commands import (
    ImportResult,
    ProgressBar,
    TransferError,
    export_command,
    export_jsonl,
    import_command,
    import_jsonl,
)

NOW = 1_795_000_000_000
DAY = 86_400_000
# Every row starts with (tenant, agentId).
TABLES = {
    "memories": "SELECT tenant, agent_id, id, role, content, hash, session_id, importance, "
    "confidence, access_count, last_accessed, timestamp, metadata, embedding, embedding_model, "
    "created_at, pinned, forgotten_at, summary, category, sensitivity, recall_policy, tags, "
    "flags FROM memories ORDER BY id",
    "sessions": "SELECT * FROM sessions ORDER BY tenant, agent_id, id",
    # positions are renumbered on import; the order is what a session means
    "session_messages": "SELECT tenant, agent_id, session_id, memory_id, role, timestamp, "
    "topic_id FROM session_messages ORDER BY tenant, agent_id, session_id, position",
    "kg_entities": "SELECT * FROM kg_entities ORDER BY tenant, agent_id, id",
    "kg_relations": "SELECT tenant, agent_id, source, type, target FROM kg_relations ORDER BY seq",
}


def migrated(path: Path) -> apsw.Connection:
    conn = open_db(path)
    migrate(conn)
    return conn


def dump(conn: apsw.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {table: [tuple(row) for row in conn.execute(sql)] for table, sql in TABLES.items()}


MEMORY_INSERT = (
    "INSERT INTO memories (id, tenant, agent_id, role, content, hash, session_id, importance, "
    "confidence, access_count, last_accessed, timestamp, metadata, embedding, embedding_model, "
    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1.0, 0, ?, ?, ?, ?, ?, ?)"
)


def fill(conn: apsw.Connection, agent: str, tenant: str = "") -> None:
    """Rows in every table, with each nullable column both set and null, written with plain SQL
    so that any tenant can be filled whatever the handlers support."""
    rng = np.random.default_rng(len(agent))
    with conn:
        ids = []
        for n, (content, role, session, metadata) in enumerate(
            [
                ("deploys fail when the cache is cold", "assistant", "s1", '{"source":"chat"}'),
                ("the deploy key rotates on Fridays", "user", "s1", None),
                ("multi\nline ```code``` and ünïcode", "system", None, '{"n":[1,2.5,null]}'),
                ("kept out of every session", "user", "s2", "{}"),
            ]
        ):
            memory_id = f"m{n}-{tenant or 'default'}-{agent}"
            text = f"{agent}: {content}"
            vector = rng.standard_normal(8).astype(np.float32).tobytes()
            embedding = (None, None) if n == 1 else (vector, "hash-256-v1")
            timestamp = NOW - n * DAY
            conn.execute(
                MEMORY_INSERT,
                (memory_id, tenant, agent, role, text, content_hash(text), session, 0.3 + 0.1 * n,
                 timestamp, timestamp, metadata, *embedding, NOW + n),
            )  # fmt: skip
            ids.append(memory_id)
        conn.execute(
            "UPDATE memories SET access_count = 7, last_accessed = ?, confidence = 0.6180339887 "
            "WHERE tenant = ? AND agent_id = ? AND role = 'assistant'",
            (NOW + DAY, tenant, agent),
        )
        # A pinned memory and a forgotten one (section 12) travel as they are.
        conn.execute(
            "UPDATE memories SET pinned = 1 WHERE tenant = ? AND agent_id = ? AND id = ?",
            (tenant, agent, ids[2]),
        )
        conn.execute(
            "UPDATE memories SET forgotten_at = ? WHERE tenant = ? AND agent_id = ? AND id = ?",
            (NOW + 2, tenant, agent, ids[1]),
        )
        # A summary and a taxonomy (sections 13, 17) travel too; the other memories keep the
        # defaults, which their records leave out.
        conn.execute(
            "UPDATE memories SET summary = 'cold caches fail deploys', category = 'fact', "
            "sensitivity = 'restricted', recall_policy = 'always', tags = '[\"ops\",\"ci\"]', "
            "flags = '[\"injection\"]' WHERE tenant = ? AND agent_id = ? AND id = ?",
            (tenant, agent, ids[0]),
        )
        conn.executemany(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(tenant, agent, "s1", NOW, NOW + 1, None, None),
             (tenant, agent, "s2", NOW + 3, NOW + 3, NOW + 5, NOW + 6)],
        )  # fmt: skip
        conn.executemany(  # positions with gaps: only their order means anything
            "INSERT INTO session_messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(tenant, agent, "s1", 1, ids[0], "assistant", NOW, "topic-1"),
             (tenant, agent, "s1", 2, ids[1], "user", NOW - DAY, None),
             (tenant, agent, "s2", 2, ids[2], "system", NOW - 2 * DAY, None),
             (tenant, agent, "s2", 5, None, "user", NOW, None),
             (tenant, agent, "s2", 9, "gone", "user", NOW + 1, None)],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO kg_entities VALUES (?, ?, ?, ?, ?)",
            [(tenant, agent, "alice", "person", '{"age":41,"tags":["x"]}'),
             (tenant, agent, "deploy", None, "{}")],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO kg_relations (tenant, agent_id, source, type, target) "
            "VALUES (?, ?, ?, ?, ?)",
            [(tenant, agent, "deploy", "owned_by", "alice"),
             (tenant, agent, "alice", "owns", "deploy")],
        )  # fmt: skip


def export_bytes(conn: apsw.Connection, agent_id: str | None = None) -> bytes:
    out = io.BytesIO()
    export_jsonl(conn, out, agent_id=agent_id, now=NOW)
    return out.getvalue()


def lines_of(data: bytes) -> list[bytes]:
    return io.BytesIO(data).readlines()


@pytest.fixture
def source(tmp_path: Path) -> apsw.Connection:
    conn = migrated(tmp_path / "source.db")
    fill(conn, "a")
    fill(conn, "b")
    return conn


@pytest.fixture
def target(tmp_path: Path) -> apsw.Connection:
    return migrated(tmp_path / "target.db")


def test_round_trip_keeps_every_column_of_every_table(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """Exporting both agents and importing into a fresh database reproduces every row."""
    data = export_bytes(source)
    result = import_jsonl(target, lines_of(data))
    assert dump(target) == dump(source)
    assert result == ImportResult(
        records=2 * (4 + 2 + 2 + 2),
        memories_imported=8,
        memories_skipped=0,
        sessions_written=4,
        sessions_unchanged=0,
        entities_written=4,
        entities_unchanged=0,
        relations_added=4,
        relations_present=0,
    )


def test_the_file_is_a_header_records_per_agent_and_an_end(source: apsw.Connection) -> None:
    """Each agent's records come together (memories, sessions, entities, relations), framed."""
    records = [msgspec.json.decode(line) for line in lines_of(export_bytes(source))]
    kinds = [(record["kind"], record.get("agentId")) for record in records]
    per_agent = [("memory",) * 4, ("session",) * 2, ("entity",) * 2, ("relation",) * 2]
    expected = [(kind, agent) for agent in ("a", "b") for group in per_agent for kind in group]
    assert kinds == [("header", None), *expected, ("end", None)]
    assert records[0] == {
        "kind": "header",
        "format": "memory-worker-export",
        "version": 1,
        "schemaVersion": len(migrations()),
        "exportedAt": NOW,
        "agent": None,
    }
    assert records[-1] == {"kind": "end", "records": 20}


def test_summary_and_taxonomy_travel_and_are_left_out_when_they_are_the_defaults(
    source: apsw.Connection,
) -> None:
    """A memory with a summary, taxonomy and flags carries them; one with the defaults is
    written exactly as before sections 13 and 17, so older files import unchanged."""
    records = [msgspec.json.decode(line) for line in lines_of(export_bytes(source, "a"))]
    memories = [record for record in records if record["kind"] == "memory"]
    described = [m for m in memories if "summary" in m]
    assert [(m["id"], m["summary"], m["category"], m["sensitivity"], m["recallPolicy"],
             m["tags"], m["flags"]) for m in described] == [
        ("m0-default-a", "cold caches fail deploys", "fact", "restricted", "always",
         ["ops", "ci"], ["injection"]),
    ]  # fmt: skip
    added = {"summary", "category", "sensitivity", "recallPolicy", "tags", "flags"}
    assert all(not added & set(m) for m in memories if m not in described)


def test_an_unknown_category_in_a_file_is_refused_naming_the_line(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """A record's taxonomy is checked as a request's is: nothing is imported."""
    lines = lines_of(export_bytes(source, "a"))
    lines[1] = lines[1].replace(b'"kind":"memory"', b'"kind":"memory","category":"gossip"')
    with pytest.raises(TransferError, match=r"line 2.*category"):
        import_jsonl(target, lines)
    assert target.execute("SELECT count(*) FROM memories").fetchall() == [(0,)]


def test_agent_option_exports_only_that_agent(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """With an agent id, the file and the imported database hold that agent and no other."""
    data = export_bytes(source, "b")
    assert msgspec.json.decode(lines_of(data)[0])["agent"] == "b"
    import_jsonl(target, lines_of(data))
    expected = {
        table: [row for row in rows if row[:2] == ("", "b")] for table, rows in dump(source).items()
    }
    assert dump(target) == expected
    assert all(expected.values())


def test_importing_twice_changes_nothing_the_second_time(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """The second import of the same file writes nothing and counts everything as present."""
    lines = lines_of(export_bytes(source))
    import_jsonl(target, lines)
    before = dump(target)
    again = import_jsonl(target, lines)
    assert dump(target) == before
    assert again == ImportResult(
        records=20,
        memories_imported=0,
        memories_skipped=8,
        sessions_written=0,
        sessions_unchanged=4,
        entities_written=0,
        entities_unchanged=4,
        relations_added=0,
        relations_present=4,
    )


def test_content_the_agent_already_holds_is_skipped_and_sessions_follow_its_id(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """A memory whose content the agent has under another id is skipped; refs use that id."""
    with target:
        existing, _, _ = insert_memory(
            target,
            agent=("", "a"),
            content="a: deploys fail when the cache is cold",
            role="user",
            now=1,
            timestamp=1,
            importance=0.9,
        )
    result = import_jsonl(target, lines_of(export_bytes(source, "a")))
    assert (result.memories_imported, result.memories_skipped) == (3, 1)
    row = target.execute("SELECT importance FROM memories WHERE id = ?", (existing,)).fetchone()
    assert row == (0.9,)  # the target's scores win
    first_ref = target.execute(
        "SELECT memory_id FROM session_messages WHERE agent_id = 'a' AND session_id = 's1' "
        "ORDER BY position LIMIT 1"
    ).fetchone()
    assert first_ref == (existing,)


def test_an_imported_session_replaces_the_one_in_the_database(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """Sessions are replaced, not merged: the file's list is the session afterwards."""
    with target:
        target.execute("INSERT INTO sessions VALUES ('', 'a', 's1', 1, 2, NULL, NULL)")
        target.execute(
            "INSERT INTO session_messages VALUES ('', 'a', 's1', 1, 'local', 'user', 3, NULL), "
            "('', 'a', 's1', 2, NULL, 'system', 4, NULL)"
        )
    import_jsonl(target, lines_of(export_bytes(source)))
    assert dump(target)["session_messages"] == dump(source)["session_messages"]
    assert dump(target)["sessions"] == dump(source)["sessions"]


def repeat_first(lines: list[bytes], kind: bytes) -> list[bytes]:
    """The file with its first record of this kind repeated on the next line."""
    at = next(n for n, line in enumerate(lines) if kind in line)
    return [*lines[: at + 1], lines[at], *lines[at + 1 :]]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda lines: lines[:-1], r"ends at line 21 without its end record"),
        (lambda lines: lines[:5] + lines[6:], r"line 21: 20 records announced, 19 read"),
        (lambda lines: lines[1:], r"line 1: not a memory-worker export"),
        (lambda lines: [], r"empty file"),
        (
            lambda lines: [*lines[:-2], lines[-2].replace(b'"type":', b'"typ":'), lines[-1]],
            r"line 21: Object contains unknown field `typ`$",
        ),
        (
            lambda lines: [*lines[:13], lines[13].replace(b'"role":"', b'"role":"robot'),
            *lines[14:]],
            r"line 14: Invalid enum value 'robot\w+' - at `\$.role`",
        ),
        (
            lambda lines: [*lines[:13], b'{"kind": "memory", "id": ]\n', *lines[14:]],
            r"line 14: JSON is malformed",
        ),
        (
            lambda lines: [*lines[:13], lines[13].replace(b'"importance":0.', b'"importance":7.'),
            *lines[14:]],
            r"line 14: Expected `float` <= 1.0 - at `\$.importance`",
        ),
        (
            lambda lines: [*lines[:13], lines[13].replace(b'"content":"b: ', b'"content":"B: '),
            *lines[14:]],
            r"line 14: hash is not the SHA-256 of content - at `\$.hash`",
        ),
        (
            lambda lines: [*lines[:12], lines[2], *lines[12:]],
            r"line 13: a memory with the same id is on line 3 - at `\$.id`",
        ),
        (lambda lines: [*lines, lines[1]], r"line 23: data after the end record"),
        (
            lambda lines: repeat_first(lines, b'"kind":"session"'),
            r"line 7: the same session is on line 6 - at `\$.id`",
        ),
        (
            lambda lines: repeat_first(lines, b'"kind":"entity"'),
            r"line 9: the same entity is on line 8 - at `\$.id`",
        ),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_the_line_and_nothing_is_imported(
    source: apsw.Connection, target: apsw.Connection, edit: Any, message: str
) -> None:
    """Truncated, cut, or with one bad line late in the file: refused, the database as before."""
    lines = edit(lines_of(export_bytes(source)))
    with pytest.raises(TransferError, match=message):
        import_jsonl(target, lines)
    assert dump(target) == {table: [] for table in TABLES}
    assert target.execute("SELECT name FROM temp.sqlite_schema").fetchall() == []


def test_an_export_of_one_agent_refuses_another_agents_record(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    """A file that says it holds agent a and carries agent b's rows was edited: refused."""
    lines = lines_of(export_bytes(source, "a"))
    lines[1] = lines[1].replace(b'"agentId":"a"', b'"agentId":"b"')
    message = r"line 2: agent 'b' in an export of agent 'a' - at `\$.agentId`"
    with pytest.raises(TransferError, match=message):
        import_jsonl(target, lines)


def test_reading_the_file_leaves_the_database_writable_by_a_worker(
    source: apsw.Connection, target: apsw.Connection, tmp_path: Path
) -> None:
    """While lines are read and checked, another connection commits without waiting."""
    other = open_db(tmp_path / "target.db")
    other.set_busy_timeout(0)
    written = []

    def write_meanwhile(done: int) -> None:
        with other:
            insert_memory(
                other,
                agent=("", "w"),
                content=f"written at {done}",
                role="user",
                now=1,
                timestamp=1,
                importance=0.5,
            )
        written.append(done)

    result = import_jsonl(target, lines_of(export_bytes(source)), progress=write_meanwhile)
    assert result.memories_imported == 8
    assert len(written) == 22
    assert written == sorted(written)
    count = target.execute("SELECT count(*) FROM memories WHERE agent_id = 'w'").fetchone()
    assert count == (22,)


def test_progress_bar_rewrites_one_line_at_most_ten_times_a_second() -> None:
    """Calls closer than 0.1 s apart are not drawn; finish draws the last state and a newline."""
    now = [0.0]
    stream = io.StringIO()
    bar = ProgressBar(stream, 20 * 100 * 1024, clock=lambda: now[0])
    for step in range(1, 21):
        now[0] = step / 16  # exact in binary: every second call is 0.125 s after a drawn one
        bar(step * 100 * 1024)
    bar.finish()
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 10 + 1
    assert frames[0] == "importing 100.0 KiB / 2.0 MiB   5%"
    assert frames[-1] == "importing 2.0 MiB / 2.0 MiB 100%\n"


def test_progress_bar_blanks_what_a_longer_previous_frame_left() -> None:
    """A shorter frame is padded so no digits of the previous one remain on the line."""
    stream = io.StringIO()
    bar = ProgressBar(stream, None, clock=lambda: 0.0, interval=0.0)
    bar(1023 * 1024)
    bar(1024 * 1024)
    assert stream.getvalue() == "\rimporting 1023.0 KiB\rimporting 1.0 MiB   "


def test_progress_bar_without_a_size_shows_bytes_only() -> None:
    """Reading stdin has no total: the bar counts bytes."""
    stream = io.StringIO()
    bar = ProgressBar(stream, None, clock=lambda: 0.0)
    bar(512)
    assert stream.getvalue() == "\rimporting 512 B"


def test_export_and_import_commands_move_a_database_file(
    source: apsw.Connection, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI functions: export to a file, import it into a new file, one summary line each."""
    exported = tmp_path / "agents.jsonl"
    config = load_config({}, db_path=str(tmp_path / "source.db"))
    options = argparse.Namespace(agent=None, tenant=None, output=str(exported))
    assert export_command(config, options) == 0
    assert capsys.readouterr().err == f"exported 20 records (all agents) from {config.db_path}\n"
    copy = load_config({}, db_path=str(tmp_path / "new" / "copy.db"))
    assert import_command(copy, argparse.Namespace(file=str(exported), tenant=None)) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"imported {exported} into {copy.db_path}: 20 records: ")
    assert dump(open_db(copy.db_path)) == dump(source)


def test_export_command_writes_only_jsonl_to_stdout_and_import_reads_stdin(
    source: apsw.Connection,
    tmp_path: Path,
    capfdbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`export > file` and `import -`: stdout carries the records and nothing else."""
    config = load_config({}, db_path=str(tmp_path / "source.db"))
    assert export_command(config, argparse.Namespace(agent="a", tenant=None, output=None)) == 0
    out = capfdbinary.readouterr().out
    records = [msgspec.json.decode(line) for line in lines_of(out)]
    records[0]["exportedAt"] = NOW
    assert records == [msgspec.json.decode(line) for line in lines_of(export_bytes(source, "a"))]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out)))
    copy = load_config({}, db_path=str(tmp_path / "copy.db"))
    assert import_command(copy, argparse.Namespace(file="-", tenant=None)) == 0
    assert open_db(copy.db_path).execute("SELECT count(*) FROM memories").fetchone() == (4,)


def test_export_command_refuses_a_missing_database_without_creating_it(tmp_path: Path) -> None:
    """Export reads; it never creates or migrates the file it is pointed at."""
    config = load_config({}, db_path=str(tmp_path / "absent.db"))
    assert export_command(config, argparse.Namespace(agent=None, tenant=None, output=None)) == 1
    assert not (tmp_path / "absent.db").exists()


def test_import_command_refuses_a_bad_file_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused file prints one error naming the line and exits 1."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"kind": "end", "records": 0}\n')
    config = load_config({}, db_path=str(tmp_path / "copy.db"))
    assert import_command(config, argparse.Namespace(file=str(bad), tenant=None)) == 1
    assert capsys.readouterr().err == (
        "memory-worker import: line 1: not a memory-worker export (no header record)\n"
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    memories=st.lists(
        st.tuples(
            st.text(min_size=1),
            st.floats(min_value=0.0, max_value=1.0),
            st.none() | st.dictionaries(st.text(), json_values, max_size=4),
            st.none() | st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=6),
        ),
        max_size=6,
    )
)
def test_any_memory_survives_the_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    memories: list[tuple[str, float, dict[str, Any] | None, list[float] | None]],
) -> None:
    """Whatever content, importance, metadata and embedding a memory has, it comes back equal."""
    folder = tmp_path_factory.mktemp("roundtrip")
    source, target = migrated(folder / "source.db"), migrated(folder / "target.db")
    with source:
        for content, importance, metadata, vector in memories:
            insert_memory(
                source,
                agent=("", "p"),
                content=content,
                role="user",
                now=NOW,
                timestamp=NOW,
                importance=importance,
                metadata=metadata,
                embedding=None if vector is None else ("m", np.array(vector, dtype=np.float32)),
            )
    import_jsonl(target, lines_of(export_bytes(source)))
    assert dump(target) == dump(source)


QUERIES: list[dict[str, Any]] = [
    {"query": "why do deploys fail?"},
    {"query": "deploy key rotation", "limit": 2},
    {"query": "cache", "roles": ["assistant"]},
    {"query": "", "sessionId": "s1"},
    {"query": "friday code ünïcode"},
]


async def recall_all(client: Client) -> list[list[Any]]:
    return [
        await client.recall(agent, **query) for agent in ("a", "b", "nobody") for query in QUERIES
    ]


async def test_recall_after_export_and_import_is_the_same(nats_url: str, tmp_path: Path) -> None:
    """The issue's criterion: a worker on the imported copy recalls exactly as the original."""
    first = App(worker_config(nats_url, tmp_path / "one.db", embedder="builtin"))
    await first.start()
    nc = await nats.connect(nats_url)
    try:
        assert first.services is not None
        first.services.clock = lambda: NOW
        client = Client(nc)
        for agent in ("a", "b"):
            for n, content in enumerate(
                [
                    "Deploys fail when the cache is cold",
                    "The deploy key rotates on Fridays",
                    "Code review: ```fix the flaky cache test```",
                    "ünïcode names break the deploy script",
                ]
            ):
                role = ("user", "assistant", "system")[n % 3]
                await client.store(
                    agent, f"{agent} {content}", role=role, sessionId=f"s{n % 2 + 1}",
                    timestamp=NOW - n * 3 * DAY, metadata={"n": n},
                )  # fmt: skip
        await client.ok("memory::consolidate", {"decayRate": 0.25})
        await recall_all(client)  # counters that must travel
        assert first.services is not None  # their write follows the replies (access_counts.py)
        await asyncio.gather(*first.services.background)
        conn = open_db(tmp_path / "one.db")
        data = export_bytes(conn)  # while the worker runs
        conn.close()
        before = await recall_all(client)
    finally:
        await nc.close()
        await first.stop()

    conn = migrated(tmp_path / "two.db")
    result = import_jsonl(conn, lines_of(data))
    conn.close()
    assert result.memories_imported == 8
    second = App(worker_config(nats_url, tmp_path / "two.db", embedder="builtin"))
    await second.start()
    nc = await nats.connect(nats_url)
    try:
        assert second.services is not None
        second.services.clock = lambda: NOW
        after = await recall_all(Client(nc))
    finally:
        await nc.close()
        await second.stop()

    assert [len(memories) for memories in before] == [len(memories) for memories in after]
    assert sum(len(memories) for memories in before) > 20
    for was, now in zip(before, after, strict=True):
        assert [m.pop("score") for m in now] == pytest.approx(
            [m.pop("score") for m in was], abs=1e-9
        )
        assert now == was  # ids, contents, counters, lastAccessed, metadata, in the same order


def test_an_import_leaves_one_audit_row_per_agent_with_the_ids_it_brought(
    source: apsw.Connection, target: apsw.Connection
) -> None:
    import_jsonl(target, lines_of(export_bytes(source)))
    rows = target.execute(
        "SELECT agent_id, trigger, source, json_array_length(ids), count FROM audit ORDER BY seq"
    ).fetchall()
    assert rows == [("a", "memory::import", "cli", 4, 4), ("b", "memory::import", "cli", 4, 4)]
    import_jsonl(target, lines_of(export_bytes(source)))  # brings nothing: no new row
    assert len(target.execute("SELECT seq FROM audit").fetchall()) == 2
