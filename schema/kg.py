"""Requests and replies of memory::kg::add and memory::kg::query (contract section 6)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from schema.base import AgentId, EntityId, Id, Reply, Request, TriggerRequest

# Part of a relation's identity (A -type-> B), so held to the same rule as an id.
RelationType = Id


class Relation(Request, frozen=True):
    target: EntityId
    type: RelationType


class Entity(Request, frozen=True):
    id: EntityId
    type: str | UnsetType = UNSET
    properties: dict[str, Any] | UnsetType = UNSET
    relations: list[Relation] | UnsetType = UNSET


class KgAddRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    entity: Entity


class KgAddReply(Reply, frozen=True):
    stored: bool
    id: str
    relations_added: int


class KgQueryRequest(TriggerRequest, frozen=True):
    agent_id: AgentId
    entity_id: EntityId
    depth: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000


class RelationOut(Reply, frozen=True):
    target: str
    type: str


class EntityOut(Reply, frozen=True):
    id: str
    type: str | None
    properties: dict[str, Any]
    relations: list[RelationOut]
    depth: int


class KgQueryReply(Reply, frozen=True):
    entities: list[EntityOut]
    truncated: bool
