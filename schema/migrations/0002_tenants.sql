-- Tenants (contract section 15): every table of agent data gains `tenant`, the caller's NATS
-- account, first in every key, so agent `a1` of two accounts is two agents. What was written
-- before is the default tenant ''. SQLite cannot change a key in place: each table is rebuilt.
ALTER TABLE memories RENAME TO old_memories;
ALTER TABLE sessions RENAME TO old_sessions;
ALTER TABLE session_messages RENAME TO old_session_messages;
ALTER TABLE kg_entities RENAME TO old_kg_entities;
ALTER TABLE kg_relations RENAME TO old_kg_relations;
DROP INDEX memories_by_agent;
DROP INDEX session_messages_by_memory;
DROP INDEX kg_relations_by_source;

CREATE TABLE memories (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL DEFAULT '',
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
    UNIQUE (tenant, agent_id, hash)
) STRICT;
CREATE INDEX memories_by_agent ON memories (tenant, agent_id, timestamp);

CREATE TABLE sessions (
    tenant       TEXT NOT NULL DEFAULT '',
    agent_id     TEXT NOT NULL,
    id           TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    compacted_at INTEGER,
    repaired_at  INTEGER,
    PRIMARY KEY (tenant, agent_id, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE session_messages (
    tenant     TEXT NOT NULL DEFAULT '',
    agent_id   TEXT NOT NULL,
    session_id TEXT NOT NULL,
    position   INTEGER NOT NULL,
    memory_id  TEXT,
    role       TEXT NOT NULL,
    timestamp  INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id, session_id, position),
    FOREIGN KEY (tenant, agent_id, session_id)
        REFERENCES sessions (tenant, agent_id, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE INDEX session_messages_by_memory ON session_messages (tenant, agent_id, memory_id);

CREATE TABLE kg_entities (
    tenant     TEXT NOT NULL DEFAULT '',
    agent_id   TEXT NOT NULL,
    id         TEXT NOT NULL,
    type       TEXT,
    properties TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, agent_id, id)
) STRICT;

CREATE TABLE kg_relations (
    seq      INTEGER PRIMARY KEY,
    tenant   TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL,
    source   TEXT NOT NULL,
    type     TEXT NOT NULL,
    target   TEXT NOT NULL,
    UNIQUE (tenant, agent_id, source, type, target)
) STRICT;
CREATE INDEX kg_relations_by_source ON kg_relations (tenant, agent_id, source, seq);

INSERT INTO memories (id, agent_id, role, content, hash, session_id, importance, confidence,
                      access_count, last_accessed, timestamp, metadata, embedding,
                      embedding_model, created_at)
    SELECT id, agent_id, role, content, hash, session_id, importance, confidence, access_count,
           last_accessed, timestamp, metadata, embedding, embedding_model, created_at
    FROM old_memories;
INSERT INTO sessions (agent_id, id, created_at, updated_at, compacted_at, repaired_at)
    SELECT agent_id, id, created_at, updated_at, compacted_at, repaired_at FROM old_sessions;
INSERT INTO session_messages (agent_id, session_id, position, memory_id, role, timestamp)
    SELECT agent_id, session_id, position, memory_id, role, timestamp FROM old_session_messages;
INSERT INTO kg_entities (agent_id, id, type, properties)
    SELECT agent_id, id, type, properties FROM old_kg_entities;
INSERT INTO kg_relations (seq, agent_id, source, type, target)
    SELECT seq, agent_id, source, type, target FROM old_kg_relations;

DROP TABLE old_session_messages;
DROP TABLE old_sessions;
DROP TABLE old_kg_relations;
DROP TABLE old_kg_entities;
DROP TABLE old_memories;
