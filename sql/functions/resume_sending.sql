-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it — and only those: a drain backing off for another reason
-- (a handler's Retry-After, Meta's pair-rate advice) keeps its time.
--
-- A drain that finds its tenant paused marks its conversation paused_wait
-- (ordo.reserve_send, or the drain itself) in a transaction that holds the
-- conversation row, then snoozes. So that no mark is missed, resume first
-- locks every conversation of the tenant that has a drain: a drain that
-- starts a step after that waits for this transaction and then reads the
-- tenant as resumed; a mark committed before it is seen here. A marked
-- conversation's drain is then made due now when it is snoozed, or — still
-- running, its snooze not recorded yet — replaced by a new job, which takes
-- the conversation once the old one lets go.
--
-- Locks: the tenant, then its conversations (in ingest's order), then their jobs
-- (sql/LOCKING.md). False when the tenant's sending was not paused.
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
    PERFORM 1 FROM ordo.conversations c
    WHERE c.tenant_id = p_tenant AND c.drain_job_id IS NOT NULL
    ORDER BY c.conversation_id COLLATE "C" FOR NO KEY UPDATE;
    FOR v_c IN
        UPDATE ordo.conversations c SET paused_wait = false
        WHERE c.tenant_id = p_tenant AND c.paused_wait
        RETURNING c.id, c.drain_job_id
    LOOP
        UPDATE ordo.river_job j SET state = 'available', scheduled_at = now()
        WHERE j.id = v_c.drain_job_id AND j.state IN ('scheduled', 'available') AND j.scheduled_at > now();
        IF NOT FOUND THEN
            PERFORM ordo.ensure_drain(v_c.id, v_c.drain_job_id)
            FROM ordo.river_job j WHERE j.id = v_c.drain_job_id AND j.state = 'running';
        END IF;
    END LOOP;
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
    RETURN true;
END;
$$;
