"""The writes of a memory's life that reply with what they decided (forget, unforget, delete,
update, toggle), as decide and apply steps (worker/writes.py): each decides from the state it
sees (handlers/life.py, handlers/switch.py), applies that decision in the same writer
transaction, records in the audit what changed, and answers from the decision. A shard logs the
decision between the two steps and replays it with the same apply."""

from __future__ import annotations

from msgspec import UNSET

from handlers.audit import Change
from handlers.life import Deletion, Marked, apply_delete, apply_marks, plan_delete, plan_forget
from handlers.switch import Toggled, apply_toggle, decide_toggle, toggled_changes
from schema.base import tenant_of
from schema.life import (
    DeleteReply,
    DeleteRequest,
    ForgetReply,
    ForgetRequest,
    UnforgetReply,
    UnforgetRequest,
    UpdateReply,
    UpdateRequest,
)
from schema.switch import ToggleReply, ToggleRequest
from worker.services import Services
from worker.storing import UPDATE, prepare_update
from worker.writes import Write, commit


def _marking(forget: bool) -> Write[Marked, None]:
    return Write(
        decision=Marked,
        decide=lambda conn, req, now, _: plan_forget(conn, req, now=now, forget=forget),
        apply=lambda conn, plan: apply_marks(conn, plan, forget=forget),
        reply=lambda plan, _: (
            ForgetReply(forgotten=len(plan.present), missing=plan.missing)
            if forget
            else UnforgetReply(restored=len(plan.present), missing=plan.missing)
        ),
        changes=lambda plan, _: [Change(plan.agent, plan.changed)],
    )


FORGET = _marking(forget=True)
UNFORGET = _marking(forget=False)
DELETE: Write[Deletion, list[str]] = Write(
    decision=Deletion,
    decide=lambda conn, req, now, _: plan_delete(conn, req),
    apply=apply_delete,
    reply=lambda plan, gone: DeleteReply(deleted=len(gone), missing=plan.missing),
    changes=lambda plan, gone: [Change(plan.agent, gone)],
)
TOGGLE: Write[Toggled, ToggleReply] = Write(
    decision=Toggled,
    decide=lambda conn, req, now, _: decide_toggle(conn, req, now=now),
    apply=apply_toggle,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: toggled_changes(event),
)


async def forget(s: Services, req: ForgetRequest) -> ForgetReply:
    reply: ForgetReply = await commit(s, "memory::forget", FORGET, req)
    return reply


async def unforget(s: Services, req: UnforgetRequest) -> UnforgetReply:
    reply: UnforgetReply = await commit(s, "memory::unforget", UNFORGET, req)
    return reply


async def delete(s: Services, req: DeleteRequest) -> DeleteReply:
    reply: DeleteReply = await commit(s, "memory::delete", DELETE, req)
    return reply


async def toggle(s: Services, req: ToggleRequest) -> ToggleReply:
    reply: ToggleReply = await commit(s, "memory::toggle", TOGGLE, req)
    return reply


async def update(s: Services, req: UpdateRequest) -> UpdateReply:
    """New content is sanitised and embedded before the writer applies the change, as a
    store's is (worker/storing.py)."""
    prepared = await prepare_update(s, req)
    reply: UpdateReply = await commit(s, "memory::update", UPDATE, req, prepared=prepared)
    s.telemetry.sanitized(tenant_of(req), reply.redactions, reply.flags)
    if req.content is not UNSET and prepared.embedding is None and s.backfill is not None:
        s.backfill.add(tenant_of(req), req.agent_id)  # the embedder failed: later
    return reply
