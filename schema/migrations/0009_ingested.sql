-- Which ingested messages were applied (worker/ingest.py): a message's write records its stream
-- (the name and when the stream was created, so a stream made again starts afresh) and sequence
-- in its own transaction, so that a redelivery after a crash finds it and changes nothing. Never
-- content. `tenant` and `agent_id` are whose partition the write went to (the task board's is
-- the tenant's agent ''): shard-split moves a key with its write, and erasing the agent removes
-- its keys. A key goes once every message at or below its sequence is acknowledged (the
-- consumer's ack floor, carried by the next write of that stream), or by eviction after the
-- audit retention (a stream deleted meanwhile).
CREATE TABLE ingested (
    stream   TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    tenant   TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (stream, seq)
) STRICT, WITHOUT ROWID;
CREATE INDEX ingested_by_agent ON ingested (tenant, agent_id);
