"""Every write trigger as two pure steps, decide and apply, and the one place that runs them.

decide (connection, request, now, prepared) -> a decision: a msgspec struct holding every id,
time and vector the write chose, read from the state it saw; apply (connection, decision) -> what
it did. The audit's changes and the reply are computed from the decision and that result.

Single mode runs both in one writer transaction (`commit`). Sharded mode (worker/shards/) runs
them the same way on a partition's owner and also appends the transaction's decisions to the
partition's log before it commits; standbys and a restarted shard `replay` the log with the same
apply, and record the same audit rows, so every copy of a partition holds the same rows.

`prepare` is what a write awaits before its transaction, outside the writer: the embedding of a
stored text, an LLM's summary. Its result goes into the decision through decide.

A write that belongs to an ingested message (the call's own trigger, on a call from durable
ingestion) records the message's key in its transaction, and one whose key is recorded already
is refused as `Repeated` before it decides anything: a redelivered message changes nothing
(handlers/ingested.py). The key is logged with the decision, so every copy records it; dispatch
names where it is kept (the row's scope: worker/route.py) when it sets the call.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import apsw
import msgspec

from handlers.audit import Call, Change, record, record_all
from handlers.ingested import IngestKey, applied, remember
from schema.errors import Repeated
from worker.audit import CALL
from worker.writer import Joinable

if TYPE_CHECKING:
    from worker.services import Services

D = TypeVar("D")
R = TypeVar("R")


@dataclass(frozen=True)
class Write(Generic[D, R]):
    decision: type[D]
    decide: Callable[[apsw.Connection, Any, int, Any], D]
    apply: Callable[[apsw.Connection, D], R]
    reply: Callable[[D, R], Any]
    changes: Callable[[D, R], Iterable[Change]]
    prepare: Callable[[Services, Any], Awaitable[Any]] | None = None
    # What the worker does once the write is committed, chosen in its transaction from the
    # decision and result (None: nothing): a store's topic due for the LLM's title. `commit`
    # runs it on the event loop; a replay never does.
    followup: Callable[[D, R], Callable[[Services], None] | None] | None = None
    # Whether a request may be decided and applied together with its batch-mates', and how they
    # are applied together: see Joined. None: each alone.
    joined: Joined[D, R] | None = None


@dataclass(frozen=True)
class Joined(Generic[D, R]):
    """How a batch of one write's calls is applied at once: `apply_all(connection, decisions)`
    returns what `apply` would have returned for each, one after the other. `fits(request,
    prepared)` says whether a call may join: its decide reads nothing a batch-mate's apply
    writes (all of them are decided before any is applied)."""

    fits: Callable[[Any, Any], bool]
    apply_all: Callable[[apsw.Connection, list[D]], list[R]]


class LogEntry(msgspec.Struct, frozen=True, array_like=True):
    """One write as a partition's log holds it: which trigger, when, on whose behalf (the audit
    row replay records), and its decision as JSON: a request's metadata may hold integers past
    64 bits, which JSON carries and MessagePack cannot."""

    trigger: str
    at: int
    source: str
    requester: str | None
    decision: bytes
    key: IngestKey | None = None  # an ingested message's (entries logged before: none)


class Logged(NamedTuple):
    """What a write's writer job returns: the reply, the write's followup (Write.followup),
    and what a sharded writer appends to its log before it commits (worker/shards/node.py):
    `entry`, encoded only when asked for, since a single worker logs nothing (issue 33:
    encoding every store's decision cost its writer)."""

    reply: Any
    then: Callable[[Services], None] | None
    trigger: str
    at: int
    source: str
    requester: str | None
    decision: Any
    key: IngestKey | None

    @property
    def entry(self) -> LogEntry:
        encoded = _ENCODER.encode(self.decision)
        return LogEntry(self.trigger, self.at, self.source, self.requester, encoded, self.key)


_ENCODER = msgspec.json.Encoder()


def decide_and_apply(
    conn: apsw.Connection,
    trigger: str,
    write: Write[Any, Any],
    request: Any,
    *,
    now: int,
    prepared: Any,
    call: Call | None,
) -> Logged:
    key = ingest_key(trigger, call)
    if key is not None and applied(conn, key.delivery):
        delivery = key.delivery
        raise Repeated(f"{trigger}: message {delivery.seq} of {delivery.stream} was applied")
    decision = write.decide(conn, request, now, prepared)
    result = write.apply(conn, decision)
    record(conn, call, write.changes(decision, result), now)
    if key is not None:
        remember(conn, key, now)
    return _logged(trigger, write, decision, result, now, call, key)


def _logged(
    trigger: str,
    write: Write[Any, Any],
    decision: Any,
    result: Any,
    now: int,
    call: Call | None,
    key: IngestKey | None,
) -> Logged:
    source, requester = ("bus", None) if call is None else (call.source, call.requester)
    then = None if write.followup is None else write.followup(decision, result)
    reply = write.reply(decision, result)
    return Logged(reply, then, trigger, now, source, requester, decision, key)


class Pending(NamedTuple):
    """A call's write waiting for the writer, to be decided and applied with its batch-mates'."""

    trigger: str
    write: Write[Any, Any]
    request: Any
    prepared: Any
    call: Call | None
    clock: Callable[[], int]


def decide_and_apply_all(conn: apsw.Connection, pending: list[Pending]) -> list[Logged]:
    """decide_and_apply for each (none of them ingested), at one time: a run of one write's
    calls decided, then applied by its Joined.apply_all, then audited by one statement."""
    logged: list[Logged] = []
    for write, each in itertools.groupby(pending, key=lambda p: p.write):
        run = list(each)
        assert write.joined is not None, "only a Joined write's calls are joinable"
        now = run[0].clock()
        decisions = [write.decide(conn, p.request, now, p.prepared) for p in run]
        results = write.joined.apply_all(conn, decisions)
        done = list(zip(run, decisions, results, strict=True))
        record_all(conn, [(p.call, write.changes(d, r)) for p, d, r in done], now)
        logged += [_logged(p.trigger, write, d, r, now, p.call, None) for p, d, r in done]
    return logged


def ingest_key(trigger: str, call: Call | None) -> IngestKey | None:
    """The key this write records: the call's ingested message, when this is the call's own
    write (a flow's other writes, such as the compaction after a canonical append, are not)."""
    if call is None or call.trigger != trigger:
        return None
    return call.message


_UNPREPARED: Any = object()


async def commit(
    services: Services,
    trigger: str,
    write: Write[Any, Any],
    request: Any,
    *,
    prepared: Any = _UNPREPARED,
    durable: bool = True,
) -> Any:
    """Prepare outside the writer (unless the caller did), then decide and apply in one writer
    transaction; the reply. `durable=False`: bookkeeping that may be lost on power loss in
    single mode (worker/writer.py); a shard logs it all the same."""
    if prepared is _UNPREPARED:
        prepared = None if write.prepare is None else await write.prepare(services, request)
    call = CALL.get()  # taken here: the writer thread does not share this task's context
    joinable = None
    joined = write.joined
    if joined is not None and ingest_key(trigger, call) is None and joined.fits(request, prepared):
        pending = Pending(trigger, write, request, prepared, call, services.clock)
        joinable = Joinable(decide_and_apply_all, pending)
    logged: Logged = await services.writer.run(
        lambda conn: decide_and_apply(
            conn, trigger, write, request, now=services.clock(), prepared=prepared, call=call
        ),
        durable=durable,
        joinable=joinable,
    )
    if logged.then is not None:
        logged.then(services)
    return logged.reply


class Replayer:
    """Applies logged writes again, decoding each decision with its trigger's type."""

    def __init__(self, writes: dict[str, Write[Any, Any]]) -> None:
        self.writes = writes
        self._decoders = {
            trigger: msgspec.json.Decoder(write.decision) for trigger, write in writes.items()
        }

    def replay(self, conn: apsw.Connection, entry: LogEntry) -> None:
        write = self.writes[entry.trigger]
        decision = self._decoders[entry.trigger].decode(entry.decision)
        result = write.apply(conn, decision)
        call = Call(entry.trigger, entry.source, entry.requester)
        record(conn, call, write.changes(decision, result), entry.at)
        if entry.key is not None:
            remember(conn, entry.key, entry.at)


def seeded_ids(seed: str) -> Callable[[], str]:
    """Ids (uuid4 in form) that a decision derives from its seed, one after another: the
    same seed names the same memories when the decision is replayed."""
    counter = itertools.count()

    def next_id() -> str:
        digest = hashlib.sha256(f"{seed}/{next(counter)}".encode()).digest()[:16]
        return str(uuid.UUID(bytes=digest, version=4))

    return next_id


class Requested(msgspec.Struct, Generic[D], frozen=True):
    """The decision of a write that chooses nothing but its time: the request itself (its ids
    are the caller's), for handlers that are deterministic over (state, request, now)."""

    request: D
    at: int


def requested(
    request_type: type[D],
    run: Callable[..., R],
    changes: Callable[[D, R], Iterable[Change]] | None = None,
) -> Write[Requested[D], R]:
    """A Write whose decision is the request and its time, applied by the pure handler
    `run(conn, request, *, now)`, which replies; `changes(request, reply)`: what the audit
    records (None: nothing)."""
    return Write(
        decision=Requested[request_type],  # type: ignore[valid-type]
        decide=lambda conn, request, now, prepared: Requested(request, now),
        apply=lambda conn, decided: run(conn, decided.request, now=decided.at),
        reply=lambda decided, result: result,
        changes=lambda decided, result: () if changes is None else changes(decided.request, result),
    )
