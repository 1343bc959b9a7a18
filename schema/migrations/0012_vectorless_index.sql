-- The backfill's batches (handlers/backfill.py `vectorless`): an agent's newest memories still
-- without a vector. Without this index each batch of 16 read every row of the agent, about a
-- second and a half at a million memories, one batch after another while stores outran the
-- embedder and long after they stopped; recalls waited for the CPU meanwhile.
CREATE INDEX memories_vectorless ON memories (tenant, agent_id, created_at)
    WHERE embedding IS NULL;
