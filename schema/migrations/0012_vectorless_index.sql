-- The backfill's batches (handlers/backfill.py `vectorless`): an agent's newest memories still
-- without a vector. Without this index each batch of 16 read every row of the agent, one batch
-- after another while stores outran the embedder and long after they stopped (at a million
-- memories a reader thread spent about 100 s of 230 in it); recalls waited for the CPU.
CREATE INDEX memories_vectorless ON memories (tenant, agent_id, created_at)
    WHERE embedding IS NULL;
