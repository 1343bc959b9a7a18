"""Topics (contract section 21): memory::topic::list, memory::topic::get and
memory::session::resume, pure reads (handlers/topics/reading.py, resume.py). A message's
topic is chosen by memory::store (storing.py)."""

from __future__ import annotations

from typing import Any

from handlers.topics.reading import topic_get, topic_list
from handlers.topics.resume import session_resume
from schema.topics import (
    SessionResumeReply,
    SessionResumeRequest,
    TopicGetReply,
    TopicGetRequest,
    TopicListReply,
    TopicListRequest,
)
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
RESUME = Route(
    "memory::session::resume",
    SessionResumeRequest,
    reply_type=SessionResumeReply,
    read=session_resume,
    bounded_by="maxChars",
)
ROUTES: tuple[Route[Any, Any], ...] = (LIST, GET, RESUME)
