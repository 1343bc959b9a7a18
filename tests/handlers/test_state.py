"""Section 14's handlers on a plain connection with a fixed clock: decide picks, apply writes,
and a replayed decision changes nothing."""

from __future__ import annotations

import apsw
import msgspec
import pytest

from handlers.kv import apply_set, decide_set
from handlers.tasks import apply_claim, decide_claim, task_list, task_post
from handlers.usage import apply_record, decide_record, usage_query
from schema.errors import Conflict
from schema.kv import KvSetRequest
from schema.tasks import TaskClaimRequest, TaskListRequest, TaskPostRequest
from schema.usage import UsageQueryRequest, UsageRecordRequest

NOW = 1_767_225_600_000


def test_a_set_decided_on_a_stale_version_is_a_conflict_and_a_replay_changes_nothing(
    conn: apsw.Connection,
) -> None:
    first = decide_set(conn, KvSetRequest(agent_id="a", key="k", value=1, if_version=0), now=NOW)
    assert apply_set(conn, first).version == 1
    with pytest.raises(Conflict):
        decide_set(conn, KvSetRequest(agent_id="a", key="k", value=2, if_version=0), now=NOW)
    second = decide_set(conn, KvSetRequest(agent_id="a", key="k", value=2), now=NOW + 1)
    apply_set(conn, second)
    apply_set(conn, first)  # replayed late: the row only moves forward
    assert conn.execute("SELECT value, version FROM kv").fetchall() == [("2", 2)]


def test_a_claim_decided_twice_takes_the_task_once_and_expires_by_the_clock(
    conn: apsw.Connection,
) -> None:
    task_post(conn, TaskPostRequest(title="t", created_by="p", claim_timeout=1000), now=NOW)
    a = decide_claim(conn, TaskClaimRequest(agent_id="a"), now=NOW)
    b = decide_claim(conn, TaskClaimRequest(agent_id="b"), now=NOW)
    assert a.seq == b.seq is not None
    claimed = apply_claim(conn, a).task
    assert claimed is not None and claimed.claimed_by == "a"
    assert apply_claim(conn, b).task is None  # the same task, taken meanwhile
    listed = task_list(conn, TaskListRequest(status="pending"), now=NOW + 1000, budget=2**20).tasks
    assert [(t.status, t.claimed_by) for t in listed] == [("pending", None)]
    late = apply_claim(conn, decide_claim(conn, TaskClaimRequest(agent_id="b"), now=NOW + 1000))
    assert late.task is not None and late.task.claimed_by == "b"


def test_usage_totals_by_day_cover_edges_and_replays(conn: apsw.Connection) -> None:
    day = 86_400_000
    events = [
        decide_record(
            UsageRecordRequest(agent_id="a", model="m", prompt_tokens=n, completion_tokens=1,
                               timestamp=NOW + n * day // 2), now=NOW)
        for n in range(1, 7)
    ]  # fmt: skip
    for event in events + events[:2]:  # two replayed
        apply_record(conn, event)
    reply = usage_query(
        conn, UsageQueryRequest(group_by="day", since=NOW + day // 2 + 1, until=NOW + 3 * day),
        now=NOW,
    )  # fmt: skip
    assert [(g.key, g.prompt_tokens, g.events) for g in reply.groups] == [
        ("2026-01-02", 2 + 3, 2),
        ("2026-01-03", 4 + 5, 2),
    ]
    assert msgspec.json.decode(msgspec.json.encode(reply.total))["events"] == 4
