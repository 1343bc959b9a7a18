-- Section 21: the topics of a session (its lines of work). `id` is unique within an agent
-- (memory::topic::get names a topic by agent and id alone). `labels` and `open_loops` are JSON
-- arrays. What assignment compares a message with (handlers/topics/profile.py) is kept in
-- three columns, so that placing a message reads only what it compares: `recent` (the recent
-- messages' keyword stems, JSON), `meaning` (the running mean vector, float32, or NULL) and
-- `profile` (JSON: the vocabulary a resume query is matched against, and messages by role).
-- `last_position` is the session position of its latest message: list orders by
-- `last_active_at`, then by it. `first_at` and `last_active_at` are message timestamps.
CREATE TABLE topics (
    tenant         TEXT NOT NULL DEFAULT '',
    agent_id       TEXT NOT NULL,
    id             TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    title          TEXT NOT NULL,
    labels         TEXT NOT NULL DEFAULT '[]',
    summary        TEXT NOT NULL DEFAULT '',
    open_loops     TEXT NOT NULL DEFAULT '[]',
    message_count  INTEGER NOT NULL DEFAULT 0,
    first_at       INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL,
    last_position  INTEGER NOT NULL DEFAULT 0,
    recent         TEXT NOT NULL DEFAULT '[]',
    meaning        BLOB,
    profile        TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, agent_id, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX topics_by_session ON topics (tenant, agent_id, session_id, last_active_at);

-- Which topic each message of a session's list belongs to (NULL: stored before topics, or
-- placed by compaction or repair, which do not assign yet).
ALTER TABLE session_messages ADD COLUMN topic_id TEXT;
CREATE INDEX session_messages_by_topic ON session_messages (tenant, agent_id, topic_id, position)
    WHERE topic_id IS NOT NULL;
