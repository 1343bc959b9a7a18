"""The knowledge graph: memory::kg::add, query and delete, per agent. Add and delete decide
nothing but their request and time (handlers/kg.py, handlers/kg_delete.py)."""

from __future__ import annotations

from typing import Any

from handlers import kg, kg_delete
from schema.kg import KgAddReply, KgAddRequest, KgQueryReply, KgQueryRequest
from schema.life import KgDeleteReply, KgDeleteRequest
from worker.route import Route
from worker.writes import requested

ADD = Route(
    "memory::kg::add",
    KgAddRequest,
    reply_type=KgAddReply,
    write=requested(KgAddRequest, kg.kg_add, kg.kg_add_changes),
    ingest=True,
)
QUERY = Route(
    "memory::kg::query",
    KgQueryRequest,
    reply_type=KgQueryReply,
    read=kg.kg_query,
    bounded_by="limit",
)
DELETE = Route(
    "memory::kg::delete",
    KgDeleteRequest,
    reply_type=KgDeleteReply,
    write=requested(KgDeleteRequest, kg_delete.kg_delete, kg_delete.kg_delete_changes),
    ingest=True,
)
ROUTES: tuple[Route[Any, Any], ...] = (ADD, QUERY, DELETE)
