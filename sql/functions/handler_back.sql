-- ordo.handler_back records that tenant p_tenant's handler answered again
-- and wakes the conversations that waited for it (handler_wait), which go
-- on in order. False when the handler was not down.
--
-- A drain that finds the handler down marks its conversation handler_wait
-- in a transaction that holds the conversation row. So that no mark
-- committed before this one is missed, every conversation of the tenant in
-- the ready set is locked first (as ordo.resume_sending does); a mark that
-- still slips past (its statement read the tenant before this committed)
-- waits at most until the probe time it read.
--
-- Locks: the tenant, then its conversations (in ingest's order), then their
-- ready rows (sql/LOCKING.md).
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
    PERFORM 1 FROM ordo.ready r JOIN ordo.conversations c ON c.id = r.conversation_pk
    WHERE r.tenant_id = p_tenant
    ORDER BY c.conversation_id COLLATE "C" FOR NO KEY UPDATE OF c;
    FOR v_c IN
        UPDATE ordo.conversations c SET handler_wait = false
        WHERE c.tenant_id = p_tenant AND c.handler_wait
        RETURNING c.id
    LOOP
        PERFORM ordo.wake_conversation(v_c.id);
    END LOOP;
    RETURN true;
END;
$$;
