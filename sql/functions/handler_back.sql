-- ordo.handler_back records that tenant p_tenant's handler answered again
-- and wakes the conversations that waited for it (handler_wait), which go
-- on in order. False when the handler was not down.
--
-- It never waits for a conversation row: an application's transaction may
-- hold several of the tenant's conversations, taken in its own order, and
-- waiting for them one after another here deadlocked with it (the chaos
-- run, seed 1). A conversation whose row is held is skipped: its drain or
-- the application commits, and the conversation looks again at its due
-- time, at most HandlerProbeMax away (jobs/reachability.go).
--
-- Locks: the tenant, then each waiting conversation it can take at once
-- (SKIP LOCKED), then its ready row (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.handler_back(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_c record;
BEGIN
    UPDATE ordo.tenants t SET handler_down_since = NULL, handler_down_reason = NULL,
                              handler_probe_at = NULL, handler_down_probes = 0
    WHERE t.id = p_tenant AND t.handler_down_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR v_c IN
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = p_tenant AND c.handler_wait
        FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        UPDATE ordo.conversations c SET handler_wait = false WHERE c.id = v_c.id;
        PERFORM ordo.wake_conversation(v_c.id);
    END LOOP;
    RETURN true;
END;
$$;
