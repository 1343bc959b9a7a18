"""Topics' titles, labels and summaries from the LLM service, asked in the background (contract
section 21; the pure parts: handlers/topics/titles.py).

A store writes a topic's built-in text in its own transaction and replies without waiting for
the LLM. When the store brought the topic to a count at which the LLM is asked (3 messages, then
every 12 more: handlers/topics/extract.py `asks_llm`), the store's write hands the titler the
topic (`followup`, worker/writes.py) and the titler, once the store is committed, asks
`llm.complete` in a task of its own: at most one request per topic and IN_FLIGHT in all per
process (a topic due while the bound is reached is skipped: it is asked again 12 messages on),
none at all with MEMORY_WORKER_TOPIC_TITLES=builtin, and none for QUIET_S after a request found
no LLM service on the bus (a bus without one would otherwise be asked on every third store of a
new topic, for nothing). No responder, a timeout
(MEMORY_WORKER_LLM_TIMEOUT), an error or an answer that is not the JSON asked for leave the
built-in text. An answer is sanitised as stored text is, then written as the
`memory::topic::title` write (decide holds it all; a shard logs and replays its apply, which
writes only if the topic still holds what the LLM was shown), audited with the topic's id.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from handlers.audit import Call, Change
from handlers.sanitize import sanitize
from handlers.topics.extract import TopicText
from handlers.topics.titles import (
    SYSTEM_PROMPT,
    Titled,
    apply_titled,
    prompt_of,
    read_answer,
    title_sample,
)
from schema.base import Agent
from worker.audit import CALL
from worker.llm import Fallback, attempt, stopping
from worker.writes import Write, commit

if TYPE_CHECKING:
    from worker.services import Services

log = structlog.get_logger()
TRIGGER = "memory::topic::title"
IN_FLIGHT = 4  # topics whose text the LLM is asked for at once, per process
QUIET_S = 60.0  # after "no responder", topics are not asked for: no LLM service is on the bus

TITLING: Write[Titled, bool] = Write(
    decision=Titled,
    decide=lambda conn, titled, now, prepared: titled,
    apply=apply_titled,
    reply=lambda d, wrote: wrote,
    changes=lambda d, wrote: [Change((d.tenant, d.agent_id), [d.topic_id])] if wrote else [],
)


def _sanitized(text: TopicText, s: Services) -> TopicText:
    """The LLM's text through the sanitiser, as a stored text goes (it is read into prompts)."""
    mode = s.config.sanitize
    return TopicText(
        title=sanitize(text.title, mode).text,
        labels=[sanitize(label, mode).text for label in text.labels],
        summary=sanitize(text.summary, mode).text,
    )


class TopicTitler:
    """The topics whose text the LLM is being asked for, per process."""

    def __init__(self, limit: int = IN_FLIGHT, quiet_s: float = QUIET_S) -> None:
        self.limit = limit
        self.quiet_s = quiet_s
        self._quiet_until = 0.0  # time.monotonic() before which no title is asked
        self._asking: set[tuple[str, str, str]] = set()
        self._tasks: dict[asyncio.Task[None], Services] = {}

    def asking(self) -> int:
        return len(self._asking)

    def quiet(self) -> bool:
        """Whether titles are not asked for now: a request lately found no LLM service."""
        return time.monotonic() < self._quiet_until

    def ask_again(self) -> None:
        """Ask at the next topic due, quiet or not (an LLM service is known to have come)."""
        self._quiet_until = 0.0

    def noticed(self, s: Services, agent: Agent, topic_id: str) -> None:
        """A store brought the topic to a count at which the LLM is asked: ask it in the
        background, unless switched off, already asking for it, or at the bound."""
        key = (*agent, topic_id)
        if s.config.topic_titles != "llm" or key in self._asking:
            return
        if self.quiet():
            return
        if len(self._asking) >= self.limit:
            log.info("topic.title_skipped", reason="in_flight", agent_id=agent[1])
            return
        self._asking.add(key)
        task = asyncio.create_task(self._title(s, agent, topic_id, CALL.get()))
        self._tasks[task] = s

        def done(_: asyncio.Task[None]) -> None:
            self._asking.discard(key)
            self._tasks.pop(task, None)

        task.add_done_callback(done)

    def cancel(self, s: Services) -> None:
        """A stop (of the worker, or of a shard's partition): its requests are abandoned, not
        waited for (the LLM may take MEMORY_WORKER_LLM_TIMEOUT); their topics keep their text."""
        for task, owner in list(self._tasks.items()):
            if owner is s:
                task.cancel()

    async def _title(self, s: Services, agent: Agent, topic_id: str, call: Call | None) -> None:
        try:
            sample = await s.readers.run(lambda conn: title_sample(conn, agent, topic_id))
            if sample is None:
                return
            said = await attempt(s.nc, s.config, SYSTEM_PROMPT, prompt_of(sample), "topic_title")
            if isinstance(said, Fallback) and said.reason == "no_responder":
                self._quiet_until = time.monotonic() + self.quiet_s
            text = read_answer(said) if isinstance(said, str) else None
            if text is None:
                if isinstance(said, str):
                    log.info("llm.fallback", reason="unreadable_answer", purpose="topic_title")
                return
            text = _sanitized(text, s)
            titled = Titled(
                tenant=agent[0], agent_id=agent[1], topic_id=topic_id,
                session_id=sample.session_id, message_count=sample.message_count,
                message_ids=sample.message_ids, title=text.title, labels=text.labels,
                summary=text.summary,
            )  # fmt: skip
            # Audited as its own trigger, on behalf of the store's caller (not its ingested key).
            source, requester = ("bus", None) if call is None else (call.source, call.requester)
            CALL.set(Call(TRIGGER, source, requester))
            await commit(s, TRIGGER, TITLING, titled, prepared=None)
        except Exception as error:  # a stop closing the writer, or anything unforeseen
            report = log.info if stopping(s.nc) else log.warning
            report("topic.title_failed", error=type(error).__name__, agent_id=agent[1])
