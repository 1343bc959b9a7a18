-- A memory's life (contract section 12): pins, soft forgetting, and the audit log.
-- A pinned memory is never evicted nor decayed; a forgotten one (forgotten_at set) is invisible
-- to recall and list until restored, and purged by eviction after a retention.
ALTER TABLE memories ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1));
ALTER TABLE memories ADD COLUMN forgotten_at INTEGER;
-- Listing pages by (timestamp, id) in either order; recall's pinned core memory; the purge.
DROP INDEX memories_by_agent;
CREATE INDEX memories_by_agent ON memories (tenant, agent_id, timestamp, id);
CREATE INDEX memories_pinned ON memories (tenant, agent_id) WHERE pinned = 1;
CREATE INDEX memories_forgotten ON memories (forgotten_at) WHERE forgotten_at IS NOT NULL;

-- Every change, never content: which trigger changed which memories of which agent, when, on
-- whose behalf. `ids` is a JSON array of at most 100 ids, else NULL with `count` saying how many.
CREATE TABLE audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    tenant    TEXT NOT NULL DEFAULT '',
    agent_id  TEXT NOT NULL,
    trigger   TEXT NOT NULL,
    ids       TEXT,
    count     INTEGER NOT NULL,
    source    TEXT NOT NULL,
    requester TEXT
) STRICT;
CREATE INDEX audit_by_agent ON audit (tenant, agent_id, seq);
CREATE INDEX audit_by_time ON audit (at);
