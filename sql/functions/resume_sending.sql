-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it, which then go on in order: a drain snoozed on the pause
-- (its conversation marked paused_wait by ordo.reserve_send) is made due
-- now; a drain still running (about to snooze: its snooze is recorded after
-- it returns) is replaced by a new one, which takes the conversation once
-- the old one lets go. Drains backing off for another reason (a handler's
-- Retry-After, Meta's pair-rate wait) keep their time. Locks: the tenant,
-- then its conversations, then their jobs (sql/LOCKING.md). False when the
-- tenant's sending was not paused.
CREATE OR REPLACE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordo.ensure_drain(c.id, c.drain_job_id)
    FROM ordo.conversations c JOIN ordo.river_job j ON j.id = c.drain_job_id
    WHERE c.tenant_id = p_tenant AND j.state = 'running'
    ORDER BY c.id;
    WITH woken AS (
        UPDATE ordo.conversations c SET paused_wait = false
        WHERE c.tenant_id = p_tenant AND c.paused_wait
        RETURNING c.drain_job_id)
    UPDATE ordo.river_job j SET state = 'available', scheduled_at = now()
    FROM woken
    WHERE j.id = woken.drain_job_id AND j.state IN ('scheduled', 'available') AND j.scheduled_at > now();
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
    RETURN true;
END;
$$;
