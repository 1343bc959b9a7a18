"""A table of the database, registered once: whose rows it holds, how an agent's erasure removes
them, how export files carry them, and what memory::stats and the metrics count in it.

The code that must know every table iterates the registrations (handlers/tables/registered.py)
instead of naming tables: memory::erase (handlers/life.py), export and import
(worker/transfer/), the counts (handlers/stats.py: memory::stats, worker/metrics.py,
worker/stats_table.py) and shard-split (worker/shards/split.py). A new table is therefore its
migration and its registration beside the others of its area; tests/test_tables.py fails on a
table of the schema that is not registered. What a table does not take part in is said with
`Skip(reason)`, never left out silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import apsw

from handlers.grants import matches_clause
from handlers.tables.records import Record
from schema.base import Agent

# Whose rows a table holds. "agent": `tenant` and `agent_id` say whose each row is (agent ''
# is the tenant's own, as the `shared` keys); "tenant": `tenant` says whose, and the rows are
# the tenant's as a whole (the task board, where `agent_id` is who posted the task), kept with
# agent '' by shard-split; None: nobody's (the worker's own bookkeeping, left behind by
# shard-split, neither erased nor exported).
Owner = Literal["agent", "tenant"] | None
R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class Skip:
    """What a table does not take part in (erasure or export), and why."""

    reason: str


# How an agent's erasure removes the table's rows: (conn, table name, agent) -> how many went.
Eraser = Callable[[apsw.Connection, str, Agent], int]


def delete_rows(conn: apsw.Connection, table: str, agent: Agent) -> int:
    """The erasure of most tables: every row of the agent."""
    conn.execute(f'DELETE FROM "{table}" WHERE tenant = ? AND agent_id = ?', agent)
    return int(conn.changes())


@dataclass(frozen=True)
class CountScope:
    """What a count is over: one tenant (None: every tenant), within it the agents `grants`
    match (None: all; handlers/grants.py), and the time a count that depends on it reads at."""

    tenant: str | None = None
    grants: Sequence[str] | None = None
    now: int = 0

    def where(self, *, granted: bool = True) -> tuple[str, tuple[str, ...]]:
        """A WHERE condition over a table with `tenant` and `agent_id`, and its parameters;
        `granted=False` leaves the grants out (a count that applies them its own way)."""
        where, params = "1", tuple[str, ...]()
        if self.tenant is not None:
            where, params = "tenant = ?", (self.tenant,)
        if granted and self.grants is not None:
            clause, patterns = matches_clause(self.grants, "agent_id")
            where, params = f"{where} AND {clause}", (*params, *patterns)
        return where, params


Counter = Callable[[apsw.Connection, CountScope], int]


def counted(sql: str) -> Counter:
    """A count that is one query: `sql` holds `{where}`, the scope's condition (CountScope)."""

    def count(conn: apsw.Connection, scope: CountScope) -> int:
        where, params = scope.where()
        [(value,)] = conn.execute(sql.format(where=where), params).fetchall()
        return int(str(value or 0))

    return count


@dataclass(frozen=True, kw_only=True)
class Stat:
    """A figure of memory::stats and the metrics: `key` is its field of the reply (camelCase on
    the wire), its gauge `memory_worker_<key>` and its key in handlers/stats.py's counts."""

    key: str
    count: Counter
    label: str  # its line in `memory-worker stats`
    metric: str | None  # the gauge's help text; None: not a gauge


@dataclass(frozen=True, kw_only=True)
class Transfer(Generic[R]):
    """How export files carry a table's rows (worker/transfer/).

    Export writes each agent's records, table after table in the registration order; import
    stages every record into TEMP tables (named `transfer_*`, this connection's own, so reading
    a long file locks nothing), then applies them in the same order in one transaction: a
    table whose records refer to another's comes after it."""

    record: type[R]  # its record struct: a tagged Record (`"kind"`)
    export: Callable[[apsw.Connection, str, str], Iterable[R]]  # (conn, tenant, agent_id)
    staging: str  # the SQL that creates its `temp.transfer_*` tables
    # Check one record and stage it for its tenant: (conn, record, tenant, line); a record the
    # file holds twice is refused (TransferError naming the line and field).
    stage: Callable[[apsw.Connection, R, str, int], None]
    # Apply what was staged: (conn, the import's time) -> what changed, by name (ImportResult).
    apply: Callable[[apsw.Connection, int], dict[str, int]]
    summary: str | None  # its part of the import's summary line, formatted with apply's counts


@dataclass(frozen=True, kw_only=True)
class Table:
    """One table's registration (see the module's docstring)."""

    name: str
    owner: Owner
    erase: Eraser | Skip
    transfer: Transfer[Any] | Skip
    erased_as: str | None = None  # the memory::erase reply's field its erased rows count in
    stats: tuple[Stat, ...] = ()

    def __post_init__(self) -> None:
        if self.owner is None and not isinstance(self.erase, Skip):
            raise ValueError(f"table {self.name}: nobody owns its rows, so none are erased")
        if self.owner is None and not isinstance(self.transfer, Skip):
            raise ValueError(f"table {self.name}: nobody owns its rows, so none are exported")
        if self.erased_as is not None and isinstance(self.erase, Skip):
            raise ValueError(f"table {self.name}: erased_as needs an erasure")
