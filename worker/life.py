"""The writes of a memory's life that reply with what they decided (forget, unforget, delete,
update, toggle):
each decides and applies in one writer job, which also records in the audit the memories it
changed, then answers from the decision (handlers/life.py)."""

from __future__ import annotations

import apsw
from msgspec import UNSET

from handlers.audit import Change
from handlers.life import Marked, apply_delete, apply_marks, plan_delete, plan_forget
from handlers.switch import Toggled, apply_toggle, decide_toggle, toggled_changes
from schema.base import agent_of, tenant_of
from schema.life import (
    DeleteReply,
    DeleteRequest,
    ForgetReply,
    ForgetRequest,
    IdsRequest,
    UnforgetReply,
    UnforgetRequest,
    UpdateReply,
    UpdateRequest,
)
from schema.switch import ToggleReply, ToggleRequest
from worker.audit import audited
from worker.services import Services
from worker.storing import UPDATE, prepare_update
from worker.writes import commit


async def _mark(s: Services, req: IdsRequest, *, forget: bool) -> tuple[int, list[str]]:
    """Forget or restore: (the agent's ids asked for, missing); the audit gets those changed."""

    def job(conn: apsw.Connection) -> Marked:
        plan = plan_forget(conn, req, now=s.clock(), forget=forget)
        apply_marks(conn, plan, forget=forget)
        return plan

    plan = await s.writer.run(
        audited(job, lambda done: [Change(done.agent, done.changed)], s.clock)
    )
    return len(plan.present), plan.missing


async def forget(s: Services, req: ForgetRequest) -> ForgetReply:
    forgotten, missing = await _mark(s, req, forget=True)
    return ForgetReply(forgotten=forgotten, missing=missing)


async def unforget(s: Services, req: UnforgetRequest) -> UnforgetReply:
    restored, missing = await _mark(s, req, forget=False)
    return UnforgetReply(restored=restored, missing=missing)


async def delete(s: Services, req: DeleteRequest) -> DeleteReply:
    def job(conn: apsw.Connection) -> tuple[list[str], list[str]]:
        plan = plan_delete(conn, req)
        return apply_delete(conn, plan), plan.missing

    deleted, missing = await s.writer.run(
        audited(job, lambda done: [Change(agent_of(req), done[0])], s.clock)
    )
    return DeleteReply(deleted=len(deleted), missing=missing)


async def update(s: Services, req: UpdateRequest) -> UpdateReply:
    """New content is sanitised and embedded before the writer applies the change, as a
    store's is (worker/storing.py)."""
    prepared = await prepare_update(s, req)
    reply: UpdateReply = await commit(s, "memory::update", UPDATE, req, prepared=prepared)
    s.telemetry.sanitizer.count(reply.redactions, reply.flags)
    if req.content is not UNSET and prepared.embedding is None and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)  # the embedder failed: later
    return reply


async def toggle(s: Services, req: ToggleRequest) -> ToggleReply:
    def job(conn: apsw.Connection) -> Toggled:
        event = decide_toggle(conn, req, now=s.clock())
        apply_toggle(conn, event)
        return event

    event = await s.writer.run(audited(job, toggled_changes, s.clock))
    return ToggleReply(enabled=event.enabled)
