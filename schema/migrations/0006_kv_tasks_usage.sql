-- Section 14: structured state beside memories. Keyed by tenant first, like every agent table.

-- Key-value: `agent_id` is the owning agent, or '' for the namespace `shared` (no agent id is
-- empty). `value` is the JSON text; `version` starts at 1 and rises by one per set.
CREATE TABLE kv (
    tenant     TEXT NOT NULL DEFAULT '',
    agent_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id, key)
) STRICT;

-- The task board, per tenant. `agent_id` is the agent that posted it (createdBy). A claim is
-- current until `claim_expires`; after it the task is pending again for every reader and
-- claimer, whether or not a write has reset the row yet. `seq` orders the board (oldest first).
CREATE TABLE tasks (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant        TEXT NOT NULL DEFAULT '',
    id            TEXT NOT NULL,
    agent_id      TEXT NOT NULL,
    title         TEXT NOT NULL,
    description   TEXT,
    assignee      TEXT,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'claimed', 'completed')),
    claimed_by    TEXT,
    claim_timeout INTEGER NOT NULL,
    claim_expires INTEGER,
    result        TEXT,
    created_at    INTEGER NOT NULL,
    claimed_at    INTEGER,
    completed_at  INTEGER,
    UNIQUE (tenant, id)
) STRICT;
-- What a claim walks, oldest first: the tasks not completed yet.
CREATE INDEX tasks_open ON tasks (tenant, seq) WHERE status <> 'completed';
CREATE INDEX tasks_by_agent ON tasks (tenant, agent_id);
CREATE INDEX tasks_by_claimer ON tasks (tenant, claimed_by) WHERE claimed_by IS NOT NULL;

-- Usage: one row per record, and per (tenant, UTC day, agent, model) running totals of them, kept
-- in the same transaction, so that a query over a long range reads the days it covers whole from
-- `usage_days` and scans raw rows only for the partial days at its two ends.
CREATE TABLE usage (
    seq               INTEGER PRIMARY KEY,
    tenant            TEXT NOT NULL DEFAULT '',
    id                TEXT NOT NULL,
    agent_id          TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER NOT NULL CHECK (completion_tokens >= 0),
    cost_usd          REAL NOT NULL CHECK (cost_usd >= 0),
    timestamp         INTEGER NOT NULL,
    UNIQUE (tenant, id)
) STRICT;
CREATE INDEX usage_by_agent ON usage (tenant, agent_id, timestamp, model, prompt_tokens,
    completion_tokens, cost_usd);
CREATE INDEX usage_by_time ON usage (tenant, timestamp, agent_id, model, prompt_tokens,
    completion_tokens, cost_usd);

CREATE TABLE usage_days (
    tenant            TEXT NOT NULL DEFAULT '',
    day               INTEGER NOT NULL,
    agent_id          TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost_usd          REAL NOT NULL,
    events            INTEGER NOT NULL,
    PRIMARY KEY (tenant, day, agent_id, model)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_days_by_agent ON usage_days (tenant, agent_id, day);
