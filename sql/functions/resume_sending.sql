-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it — and only those: a drain backing off for another reason
-- (a handler's Retry-After, Meta's pair-rate advice) keeps its time.
--
-- A drain that finds its tenant paused marks its conversation paused_wait
-- (ordo.reserve_send, or the drain itself) in a transaction that holds the
-- conversation row, then waits. So that no mark is missed, resume first
-- locks every conversation of the tenant in the ready set: a drain that
-- starts a step after that waits for this transaction and then reads the
-- tenant as resumed; a mark committed before it is seen here. Each marked
-- conversation is then woken (ordo.wake_conversation): due now when it
-- waits, or — its drain still running, its wait not recorded yet — marked
-- so that the wait ends at once.
--
-- Locks: the tenant, then its conversations (in ingest's order), then their
-- ready rows (sql/LOCKING.md). False when the tenant's sending was not paused.
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
    PERFORM 1 FROM ordo.ready r JOIN ordo.conversations c ON c.id = r.conversation_pk
    WHERE r.tenant_id = p_tenant
    ORDER BY c.conversation_id COLLATE "C" FOR NO KEY UPDATE OF c;
    FOR v_c IN
        UPDATE ordo.conversations c SET paused_wait = false
        WHERE c.tenant_id = p_tenant AND c.paused_wait
        RETURNING c.id
    LOOP
        PERFORM ordo.wake_conversation(v_c.id);
    END LOOP;
    RETURN true;
END;
$$;
