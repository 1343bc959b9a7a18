"""Topics (contract section 21): memory::topic::list and memory::topic::get, pure reads
(handlers/topics/reading.py). A message's topic is chosen by memory::store (storing.py)."""

from __future__ import annotations

from typing import Any

from handlers.topics.reading import topic_get, topic_list
from schema.topics import TopicGetReply, TopicGetRequest, TopicListReply, TopicListRequest
from worker.route import Route

LIST = Route(
    "memory::topic::list",
    TopicListRequest,
    reply_type=TopicListReply,
    read=topic_list,
)
GET = Route(
    "memory::topic::get",
    TopicGetRequest,
    reply_type=TopicGetReply,
    read=topic_get,
    bounded_by="limit",
)
ROUTES: tuple[Route[Any, Any], ...] = (LIST, GET)
