-- ordo.resume_sending lifts a tenant's sending pause and wakes its
-- conversations' drains, which then go on in order: a snoozed drain is made
-- due now; a drain still running (about to snooze: its snooze is recorded
-- after it returns) is replaced by a new one, which takes the conversation
-- once the old one lets go. False when the tenant's sending was not paused.
CREATE OR REPLACE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE ordo.river_job j SET state = 'available', scheduled_at = now()
    FROM ordo.conversations c
    WHERE c.tenant_id = p_tenant AND j.id = c.drain_job_id
      AND j.state IN ('scheduled', 'available') AND j.scheduled_at > now();
    PERFORM ordo.ensure_drain(c.id, c.drain_job_id)
    FROM ordo.conversations c JOIN ordo.river_job j ON j.id = c.drain_job_id
    WHERE c.tenant_id = p_tenant AND j.state = 'running';
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
    RETURN true;
END;
$$;
