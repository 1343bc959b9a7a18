"""What memory::store and memory::update do before the writer (worker/writes.py `prepare`):
check the request, pass its text through the sanitiser (section 13), embed what will be stored.
Their decide and apply steps are in worker/triggers/storing.py.

The sanitiser runs before the hash and the embedding, so dedup, keywords and vectors only ever
see the redacted text, and it runs on a thread for long texts (its worst case is a fraction of a
second at 512 KiB: README "The sanitiser"), never on the event loop. The summary passes it too:
it is replayed into prompts as the content is.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET

from handlers.facts.extract import Statement, extract_statements
from handlers.placing import Embedding
from handlers.sanitize import Sanitized, sanitize
from handlers.store import check_store
from handlers.update import check_update
from schema.life import UpdateRequest
from schema.memory import StoreRequest
from worker.recall_index.backfill import DEFER_AT
from worker.services import Services

# Texts longer than this are sanitised on a thread (about 1 ms of rules at this size).
THREAD_AT = 16_384


class Prepared(NamedTuple):
    request: Any  # the request with its text sanitised
    found: Sanitized  # what the sanitiser did, content and summary together
    embedding: Embedding | None
    statements: tuple[Statement, ...] = ()  # the facts its sanitised text states (section 19)
    topics: bool = True  # whether a message stored in a session joins a topic (section 21)


async def _sanitized(s: Services, texts: list[str]) -> list[Sanitized]:
    def run() -> list[Sanitized]:
        return [sanitize(text, s.config.sanitize) for text in texts]

    if sum(len(text) for text in texts) > THREAD_AT:
        return await asyncio.to_thread(run)
    return run()


def _merged(parts: list[Sanitized], text: str) -> Sanitized:
    if not any(part.rules for part in parts):  # most texts: nothing found in any part
        return Sanitized(text, {}, [], ())
    redactions: Counter[str] = Counter()
    for part in parts:
        redactions.update(part.redactions)
    flags = sorted({flag for part in parts for flag in part.flags})
    rules = tuple(sorted({rule for part in parts for rule in part.rules}))
    return Sanitized(text, dict(sorted(redactions.items())), flags, rules)


async def _embedded(s: Services, text: str, *, may_defer: bool) -> Embedding | None:
    """None when the model is a batch behind (a store leaves the vector to the backfill) or
    failed; the backfill gives the memory its vector later."""
    if may_defer and s.backfill is not None and s.embedder.backlog() >= DEFER_AT:
        return None
    [vector] = await s.embedder.embed([text], query=False)
    return None if vector is None else (s.embedder.name, vector)


async def prepare_store(s: Services, req: StoreRequest) -> Prepared:
    """Checked, sanitised and embedded: what a store or a canonical append decides from."""
    check_store(req, s.config.max_content_bytes)
    texts = [req.content] + ([] if req.summary is UNSET or not req.summary else [req.summary])
    parts = await _sanitized(s, texts)
    clean = req
    if any(part.text is not text for part, text in zip(parts, texts, strict=True)):
        clean = msgspec.structs.replace(
            req,
            content=parts[0].text,
            summary=parts[1].text if len(parts) > 1 else req.summary,
        )
    embedding = await _embedded(s, clean.content, may_defer=True)
    statements: tuple[Statement, ...] = ()
    if s.config.facts == "extract" and clean.role in ("user", "assistant"):
        statements = tuple(extract_statements(clean.content))
    topics = s.config.topics == "assign"
    return Prepared(clean, _merged(parts, parts[0].text), embedding, statements, topics)


async def prepare_after_recalls(s: Services, req: StoreRequest) -> Prepared:
    """A store starts after the recalls in progress (briefly: worker/recalls_first.py)."""
    await s.recalls_first.after_recalls()
    return await prepare_store(s, req)


async def prepare_update(s: Services, req: UpdateRequest) -> Prepared:
    check_update(req, s.config.max_content_bytes)
    asked = {"content": req.content, "summary": req.summary}
    texts = {name: text for name, text in asked.items() if isinstance(text, str) and text}
    parts = dict(zip(texts, await _sanitized(s, list(texts.values())), strict=True))
    clean = msgspec.structs.replace(req, **{name: part.text for name, part in parts.items()})
    embedding = None
    if clean.content is not UNSET:
        embedding = await _embedded(s, clean.content, may_defer=False)
    merged = _merged(list(parts.values()), "")
    return Prepared(clean, merged, embedding)
