-- Section 13: a memory whose recall policy is `always` is part of the agent's core memory, as a
-- pinned one is (recall's `withPinned`, memory::context). Every context asks for it, so it is
-- an index lookup, not a scan of the agent.
CREATE INDEX memories_core ON memories (tenant, agent_id)
    WHERE pinned = 1 OR recall_policy = 'always';
