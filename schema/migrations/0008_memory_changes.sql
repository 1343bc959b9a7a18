-- Which memories changed, in commit order, whoever wrote them (this worker, a second worker on
-- the same file, an import): the recall index's persisted columns (worker/recall_index/) record
-- the sequence they are complete through and replay only what changed since. Never content:
-- a memory's id and agent. `readd` is 1 when what the memory is found by changed (content,
-- summary, taxonomy, metadata, session...), so that it is indexed anew; 0 when it only needs
-- its row read again (stored, deleted, rescored, forgotten, moved away).
CREATE TABLE memory_changes (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant    TEXT NOT NULL,
    agent_id  TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    readd     INTEGER NOT NULL
);
-- Per agent, the newest change trimmed off the log: a snapshot older than it missed changes.
CREATE TABLE memory_changes_trimmed (
    tenant   TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    through  INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER memory_changes_on_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (new.tenant, new.agent_id, new.id, 0); END;
CREATE TRIGGER memory_changes_on_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (old.tenant, old.agent_id, old.id, 0); END;
CREATE TRIGGER memory_changes_on_rescore
    AFTER UPDATE OF confidence, importance, timestamp, embedding, embedding_model, forgotten_at
    ON memories BEGIN
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (new.tenant, new.agent_id, new.id, 0); END;
CREATE TRIGGER memory_changes_on_rewrite
    AFTER UPDATE OF content, role, session_id, metadata, pinned, summary, category, sensitivity,
    recall_policy, tags ON memories BEGIN
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (new.tenant, new.agent_id, new.id, 1); END;
CREATE TRIGGER memory_changes_on_move AFTER UPDATE OF tenant, agent_id ON memories BEGIN
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (old.tenant, old.agent_id, old.id, 0);
    INSERT INTO memory_changes (tenant, agent_id, memory_id, readd)
    VALUES (new.tenant, new.agent_id, new.id, 1); END;
