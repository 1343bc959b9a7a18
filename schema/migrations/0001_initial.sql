-- Memories, sessions, the knowledge graph and the scheduler's claims, all scoped by agent.
CREATE TABLE memories (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    role            TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content         TEXT NOT NULL,
    hash            TEXT NOT NULL,
    session_id      TEXT,
    importance      REAL NOT NULL,
    confidence      REAL NOT NULL,
    access_count    INTEGER NOT NULL DEFAULT 0,
    last_accessed   INTEGER NOT NULL,
    timestamp       INTEGER NOT NULL,
    metadata        TEXT,
    embedding       BLOB,
    embedding_model TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (agent_id, hash)
) STRICT;
CREATE INDEX memories_by_agent ON memories (agent_id, timestamp);

CREATE TABLE sessions (
    agent_id     TEXT NOT NULL,
    id           TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    compacted_at INTEGER,
    repaired_at  INTEGER,
    PRIMARY KEY (agent_id, id)
) STRICT, WITHOUT ROWID;

-- A session's ordered message list. References are kept as written (repair exists because
-- they can go wrong), so memory_id is not a foreign key.
CREATE TABLE session_messages (
    agent_id   TEXT NOT NULL,
    session_id TEXT NOT NULL,
    position   INTEGER NOT NULL,
    memory_id  TEXT,
    role       TEXT NOT NULL,
    timestamp  INTEGER NOT NULL,
    PRIMARY KEY (agent_id, session_id, position),
    FOREIGN KEY (agent_id, session_id) REFERENCES sessions (agent_id, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE INDEX session_messages_by_memory ON session_messages (agent_id, memory_id);

CREATE TABLE kg_entities (
    agent_id   TEXT NOT NULL,
    id         TEXT NOT NULL,
    type       TEXT,
    properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (agent_id, id)
) STRICT;

CREATE TABLE kg_relations (
    seq      INTEGER PRIMARY KEY,
    agent_id TEXT NOT NULL,
    source   TEXT NOT NULL,
    type     TEXT NOT NULL,
    target   TEXT NOT NULL,
    UNIQUE (agent_id, source, type, target)
) STRICT;
CREATE INDEX kg_relations_by_source ON kg_relations (agent_id, source, seq);

-- One row per scheduled job: the last fire time some worker claimed. Claiming is an UPDATE that
-- only one of several workers sharing the file can win.
CREATE TABLE schedule_claims (
    job       TEXT PRIMARY KEY,
    last_fire INTEGER NOT NULL
) STRICT;
