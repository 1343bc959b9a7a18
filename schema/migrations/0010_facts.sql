-- Section 19: facts an agent believes, with when each held (valid time: valid_from, valid_to)
-- and when the worker learned and unlearned it (record time: recorded_at, expired_at).
-- `subject_key` and `object_key` are the compared forms (case folded, spaces collapsed, a
-- leading "the" dropped); `subject` and `object` are as first written. `line` names the
-- timeline a fact belongs to (handlers/facts/timeline.py): the subject and a single-valued
-- predicate, or the subject, the predicate (likes and dislikes share one) and the object.
-- `ended_at` is an explicit end (memory::fact::end); `valid_to` and `superseded_by` are what the
-- timeline makes of the facts that are not retracted, kept up to date by every write of it (a
-- retracted fact keeps those it had). `seq` orders facts of one `valid_from` by arrival.
-- `sourced`: asserted with source memories, so deleted once every one of them is gone.
CREATE TABLE facts (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    tenant        TEXT NOT NULL DEFAULT '',
    agent_id      TEXT NOT NULL,
    subject       TEXT NOT NULL,
    subject_key   TEXT NOT NULL,
    predicate     TEXT NOT NULL,
    object        TEXT NOT NULL,
    object_key    TEXT NOT NULL,
    line          TEXT NOT NULL,
    valid_from    INTEGER NOT NULL,
    valid_to      INTEGER,
    ended_at      INTEGER,
    recorded_at   INTEGER NOT NULL,
    expired_at    INTEGER,
    confidence    REAL NOT NULL,
    superseded_by TEXT,
    sourced       INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX facts_by_line ON facts (tenant, agent_id, line, valid_from, seq);
CREATE INDEX facts_by_subject ON facts (tenant, agent_id, subject_key, predicate, valid_from);
CREATE INDEX facts_current ON facts (tenant, agent_id, subject_key, predicate, valid_from)
    WHERE valid_to IS NULL AND expired_at IS NULL;

-- The memories a fact came from (memory ids of the fact's agent).
CREATE TABLE fact_sources (
    tenant    TEXT NOT NULL DEFAULT '',
    agent_id  TEXT NOT NULL,
    fact_id   TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    PRIMARY KEY (fact_id, memory_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX fact_sources_by_memory ON fact_sources (tenant, agent_id, memory_id);
