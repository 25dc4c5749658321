-- ordo.number_back records that the Cloud API answered a send of tenant
-- p_tenant's number again (a success, or any answer that is not an
-- outage) and wakes the conversations that waited for it
-- (ordo.wake_waiting), which go on in order. False when the number was not
-- down.
--
-- p_prober is the conversation whose drain got the answer, if a drain did:
-- its mark goes, but it is not woken (ordo.wake_waiting).
--
-- Locks: the tenant, then ordo.wake_waiting's (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.number_back(p_tenant bigint, p_prober bigint DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET number_down_since = NULL, number_down_reason = NULL,
                              number_probe_at = NULL, number_down_probes = 0,
                              number_fail_steps = NULL, number_fail_since = NULL, number_fail_sent = NULL
    WHERE t.id = p_tenant AND t.number_down_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordo.wake_waiting(p_tenant, 'number', p_prober);
    RETURN true;
END;
$$;
