-- ordo.handler_back records that tenant p_tenant's handler answered again
-- and wakes the conversations that waited for it (handler_wait), which go
-- on in order. False when the handler was not down.
--
-- It never waits for a conversation row: an application's transaction may
-- hold several of the tenant's conversations, taken in its own order, and
-- waiting for them one after another here deadlocked with it (the chaos
-- run, seed 1). A conversation whose row is held longer than 200 ms
-- (lock_timeout; a drain's write takes milliseconds) is skipped: the
-- application commits, and the conversation looks again at its due
-- time, at most HandlerProbeMax away (jobs/reachability.go).
--
-- Locks: the tenant, then each waiting conversation it can take at once
-- (waiting at most 200 ms for each), then its ready row (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.handler_back(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_c       record;
    v_timeout text;
BEGIN
    UPDATE ordo.tenants t SET handler_down_since = NULL, handler_down_reason = NULL,
                              handler_probe_at = NULL, handler_down_probes = 0
    WHERE t.id = p_tenant AND t.handler_down_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_timeout := current_setting('lock_timeout');
    FOR v_c IN
        -- Every conversation in the ready set, not only those marked
        -- now: a drain marking one right now is waited for (its write
        -- takes milliseconds), and its mark is then seen.
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = p_tenant
          AND (c.handler_wait OR EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id))
        ORDER BY c.conversation_id COLLATE "C"
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            PERFORM 1 FROM ordo.conversations c WHERE c.id = v_c.id AND c.handler_wait FOR NO KEY UPDATE;
            IF FOUND THEN
                UPDATE ordo.conversations c SET handler_wait = false WHERE c.id = v_c.id;
                PERFORM ordo.wake_conversation(v_c.id);
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            NULL; -- held by a longer transaction: its due time wakes it
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
    RETURN true;
END;
$$;
