-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it — and only those: a drain backing off for another reason
-- (a handler's Retry-After, Meta's pair-rate advice) keeps its time.
--
-- It never waits for a conversation row: an application's transaction may
-- hold several of the tenant's conversations, taken in its own order, and
-- locking the tenant's conversations one after another here deadlocked with
-- it (the chaos run, seed 1, with ordo.handler_back, which works the same
-- way). A paused_wait conversation whose row is held longer than 200 ms
-- (lock_timeout; a drain's write takes milliseconds) is skipped: the
-- application commits, and the conversation looks again at its due
-- time (at most jobs.Config.PausedRecheck away), finding the tenant
-- resumed.
--
-- Locks: the tenant, then each waiting conversation it can take at once
-- (waiting at most 200 ms for each), then its ready row (sql/LOCKING.md). False when the
-- tenant's sending was not paused.
CREATE OR REPLACE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_c       record;
    v_timeout text;
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
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
          AND (c.paused_wait OR EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id))
        ORDER BY c.conversation_id COLLATE "C"
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            PERFORM 1 FROM ordo.conversations c WHERE c.id = v_c.id AND c.paused_wait FOR NO KEY UPDATE;
            IF FOUND THEN
                UPDATE ordo.conversations c SET paused_wait = false WHERE c.id = v_c.id;
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
