-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it — and only those: a drain backing off for another reason
-- (a handler's Retry-After, Meta's pair-rate advice) keeps its time.
--
-- It never waits for a conversation row: an application's transaction may
-- hold several of the tenant's conversations, taken in its own order, and
-- locking the tenant's conversations one after another here deadlocked with
-- it (the chaos run, seed 1, with ordo.handler_back, which works the same
-- way). A paused_wait conversation whose row is held is skipped: its drain
-- or the application commits, and the conversation looks again at its due
-- time (at most jobs.Config.PausedRecheck away), finding the tenant
-- resumed.
--
-- Locks: the tenant, then each waiting conversation it can take at once
-- (SKIP LOCKED), then its ready row (sql/LOCKING.md). False when the
-- tenant's sending was not paused.
CREATE OR REPLACE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_c record;
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR v_c IN
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = p_tenant AND c.paused_wait
        FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        UPDATE ordo.conversations c SET paused_wait = false WHERE c.id = v_c.id;
        PERFORM ordo.wake_conversation(v_c.id);
    END LOOP;
    RETURN true;
END;
$$;
