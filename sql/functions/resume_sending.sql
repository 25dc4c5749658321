-- ordo.resume_sending lifts a tenant's sending pause and wakes the drains
-- that wait for it (ordo.wake_waiting) — and only those: a drain backing
-- off for another reason (a handler's Retry-After, Meta's pair-rate advice)
-- keeps its time. False when the tenant's sending was not paused.
--
-- Locks: the tenant, then ordo.wake_waiting's (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordo.wake_waiting(p_tenant, 'sending');
    RETURN true;
END;
$$;
