-- Canonical sessions (section 14): one per (tenant, agent, user) across channels. The messages
-- are ordinary memories in the agent's session `canonical:<userId>`; this row is what that
-- session is about: the summary of its last compaction (NULL before the first), the channel of
-- the last message, how many messages were appended, and when the row last changed.
CREATE TABLE canonical_sessions (
    tenant        TEXT NOT NULL DEFAULT '',
    agent_id      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    summary       TEXT,
    last_channel  TEXT NOT NULL,
    message_count INTEGER NOT NULL CHECK (message_count >= 0),
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id, user_id)
) STRICT, WITHOUT ROWID;
