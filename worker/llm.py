"""The calls out to `llm.complete`: session compaction's, one request per chunk, and a topic's
title (worker/topic_titles.py), one request.

Any failure (no responder, a timeout, an error reply, an empty or malformed answer) makes the
whole summary fall back to the worker's own: a summary is never partly from the LLM.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import structlog

from worker.config import Config
from worker.outgoing import CallFailed, call

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


class Fallback(Exception):
    """Why the LLM's summary cannot be used; `reason` is a stable word for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _complete(nc: Any, config: Config, chunk: str, system: str = SYSTEM_PROMPT) -> str:
    request = LlmRequest(
        model=LlmModel(config.llm_provider, config.llm_model, config.llm_max_tokens),
        system_prompt=system,
        messages=[LlmMessage("user", chunk)],
    )
    try:
        reply = await call(nc, SUBJECT, request, LlmReply, config.llm_timeout)
    except CallFailed as failed:
        raise Fallback(failed.reason) from None
    content = reply.content.strip()
    if not content:
        raise Fallback("empty_answer")
    return content


async def summarise(nc: Any, config: Config, chunks: list[str]) -> str | None:
    """The chunks' summaries joined by a blank line, or None when the LLM cannot give them;
    then `llm.fallback` says why, so an operator can tell a missing service from a slow one."""
    if not chunks:
        return None
    try:
        answers = await asyncio.gather(*(_complete(nc, config, chunk) for chunk in chunks))
    except Fallback as fallback:
        log.warning("llm.fallback", reason=fallback.reason, subject=SUBJECT, chunks=len(chunks))
        return None
    except Exception as error:  # a closed connection, or anything unforeseen
        log.warning(
            "llm.fallback",
            reason="failed",
            error=type(error).__name__,
            subject=SUBJECT,
            chunks=len(chunks),
        )
        return None
    return "\n\n".join(answers)


async def attempt(
    nc: Any, config: Config, system: str, text: str, purpose: str
) -> str | Fallback | None:
    """The LLM's answer to one request (timeout `llm_timeout`); a Fallback saying why when it
    gave none (then `llm.fallback` says why too, with `purpose`: what the answer was for), so a
    caller can stop asking a bus that has no LLM service on it; None when the call failed
    otherwise (the worker stopping, or anything unforeseen)."""
    try:
        return await _complete(nc, config, text, system)
    except Fallback as fallback:
        log.info("llm.fallback", reason=fallback.reason, subject=SUBJECT, purpose=purpose)
        return fallback
    except Exception as error:  # a closed connection (the worker stopping), or anything unforeseen
        report = log.info if stopping(nc) else log.warning
        report(
            "llm.fallback",
            reason="failed",
            error=type(error).__name__,
            subject=SUBJECT,
            purpose=purpose,
        )
    return None


def stopping(nc: Any) -> bool:
    """Whether the NATS connection is closing or closed: what fails then is the stop's doing."""
    return nc is None or bool(nc.is_closed or nc.is_draining)
