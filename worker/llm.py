"""The call out to `llm.complete` that session compaction makes, one request per chunk.

Any failure (no responder, a timeout, an error reply, an empty or malformed answer) makes the
whole summary fall back to the worker's own: a summary is never partly from the LLM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import structlog

from worker.config import Config

log = structlog.get_logger()
SUBJECT = "llm.complete"
SYSTEM_PROMPT = (
    "You summarise part of a conversation for an AI agent's long-term memory. Keep the facts, "
    "decisions, names, dates, numbers and open tasks; drop greetings and filler. Answer with "
    "the summary only, in plain prose or short bullet points."
)


class LlmModel(msgspec.Struct, frozen=True, rename="camel"):
    provider: str
    model: str
    max_tokens: int


class LlmMessage(msgspec.Struct, frozen=True):
    role: str
    content: str


class LlmRequest(msgspec.Struct, frozen=True, rename="camel"):
    model: LlmModel
    system_prompt: str
    messages: list[LlmMessage]


class LlmReply(msgspec.Struct, frozen=True):
    content: str


async def _complete(nc: Any, config: Config, chunk: str) -> str:
    request = LlmRequest(
        model=LlmModel(config.llm_provider, config.llm_model, config.llm_max_tokens),
        system_prompt=SYSTEM_PROMPT,
        messages=[LlmMessage("user", chunk)],
    )
    msg = await nc.request(SUBJECT, msgspec.json.encode(request), timeout=config.llm_timeout)
    if msg.headers and msg.headers.get("Nats-Service-Error-Code"):
        raise RuntimeError(msg.headers.get("Nats-Service-Error", "error reply"))
    content = msgspec.json.decode(msg.data, type=LlmReply).content.strip()
    if not content:
        raise ValueError("empty summary")
    return content


async def summarise(nc: Any, config: Config, chunks: list[str]) -> str | None:
    """The chunks' summaries joined by a blank line, or None when the LLM cannot give them."""
    if not chunks:
        return None
    try:
        answers = await asyncio.gather(*(_complete(nc, config, chunk) for chunk in chunks))
    except Exception as error:
        log.warning("compaction.llm_unavailable", error=type(error).__name__)
        return None
    return "\n\n".join(answers)
