-- Sections 13 and 17: what a memory says about itself beyond its content, and the memory switch.
-- `summary` (at most 1 KiB) is returned with the memory and scored with its keywords; the
-- taxonomy (category, sensitivity, recall policy, tags) is chosen by the caller; `flags` are
-- what the sanitiser found (`injection`, and `pii:<type>` in flag mode). `tags` and `flags` are
-- JSON arrays of strings, NULL when empty.
ALTER TABLE memories ADD COLUMN summary TEXT;
ALTER TABLE memories ADD COLUMN category TEXT NOT NULL DEFAULT 'note'
    CHECK (category IN ('fact', 'preference', 'event', 'instruction', 'note'));
ALTER TABLE memories ADD COLUMN sensitivity TEXT NOT NULL DEFAULT 'internal'
    CHECK (sensitivity IN ('public', 'internal', 'restricted'));
ALTER TABLE memories ADD COLUMN recall_policy TEXT NOT NULL DEFAULT 'auto'
    CHECK (recall_policy IN ('auto', 'always', 'never'));
ALTER TABLE memories ADD COLUMN tags TEXT;
ALTER TABLE memories ADD COLUMN flags TEXT;

-- An agent whose memory is switched off (memory::toggle): while a row is here, stores write
-- nothing, recall and context return nothing and maintenance leaves the agent alone. Its data
-- stays; enabling deletes the row.
CREATE TABLE agent_switch (
    tenant      TEXT NOT NULL DEFAULT '',
    agent_id    TEXT NOT NULL,
    disabled_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id)
) STRICT, WITHOUT ROWID;

-- What an audit row can say beyond ids and a count, never content: which sanitiser rules fired
-- on a store or update (`{"redactions": {"email": 1}, "flags": ["injection"]}`), the state a
-- toggle set (`{"enabled": false}`). A JSON object, NULL when there is nothing to say.
ALTER TABLE audit ADD COLUMN detail TEXT;
