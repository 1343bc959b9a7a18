"""A memory's life: memory::get, list, forget, unforget, delete, erase and toggle (update, which
embeds, is with the memory's other writes in worker/triggers/memory.py).

The writes that reply with what they decided (forget, unforget, delete, toggle) are decide and
apply steps (worker/writes.py): each decides from the state it sees (handlers/life.py,
handlers/switch.py), applies that decision in the same writer transaction, records in the audit
what changed, and answers from the decision. A shard logs the decision between the two steps and
replays it with the same apply. Erase decides nothing but its request and time.
"""

from __future__ import annotations

from typing import Any

from handlers import life, listing
from handlers.audit import Change
from handlers.life import Deletion, Marked, apply_delete, apply_marks, plan_delete, plan_forget
from handlers.switch import Toggled, apply_toggle, decide_toggle, toggled_changes
from schema.life import (
    DeleteReply,
    DeleteRequest,
    EraseReply,
    EraseRequest,
    ForgetReply,
    ForgetRequest,
    GetReply,
    GetRequest,
    ListReply,
    ListRequest,
    UnforgetReply,
    UnforgetRequest,
)
from schema.switch import ToggleReply, ToggleRequest
from worker.route import Route
from worker.writes import Write, requested


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


DELETION: Write[Deletion, list[str]] = Write(
    decision=Deletion,
    decide=lambda conn, req, now, _: plan_delete(conn, req),
    apply=apply_delete,
    reply=lambda plan, gone: DeleteReply(deleted=len(gone), missing=plan.missing),
    changes=lambda plan, gone: [Change(plan.agent, gone)],
)
TOGGLING: Write[Toggled, ToggleReply] = Write(
    decision=Toggled,
    decide=lambda conn, req, now, _: decide_toggle(conn, req, now=now),
    apply=apply_toggle,
    reply=lambda event, reply: reply,
    changes=lambda event, reply: toggled_changes(event),
)

GET = Route(
    "memory::get", GetRequest, reply_type=GetReply, read=life.get_memories, bounded_by="ids"
)
LIST = Route("memory::list", ListRequest, reply_type=ListReply, read=listing.list_memories)
FORGET = Route(
    "memory::forget", ForgetRequest, reply_type=ForgetReply, write=_marking(True), ingest=True
)
UNFORGET = Route(
    "memory::unforget",
    UnforgetRequest,
    reply_type=UnforgetReply,
    write=_marking(False),
    ingest=True,
)
DELETE = Route("memory::delete", DeleteRequest, reply_type=DeleteReply, write=DELETION, ingest=True)
ERASE = Route(
    "memory::erase",
    EraseRequest,
    reply_type=EraseReply,
    write=requested(EraseRequest, life.erase_agent, life.erase_changes),
    ingest=True,
)
TOGGLE = Route("memory::toggle", ToggleRequest, reply_type=ToggleReply, write=TOGGLING, ingest=True)
ROUTES: tuple[Route[Any, Any], ...] = (GET, LIST, FORGET, UNFORGET, DELETE, ERASE, TOGGLE)
