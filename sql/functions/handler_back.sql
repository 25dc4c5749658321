-- ordo.handler_back records that tenant p_tenant's handler answered again
-- and wakes the conversations that waited for it (ordo.wake_waiting),
-- which go on in order. False when the handler was not down.
--
-- p_prober is the conversation whose drain got the answer, if a drain did:
-- its mark goes, but it is not woken (ordo.wake_waiting).
--
-- Locks: the tenant, then ordo.wake_waiting's (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.handler_back(p_tenant bigint, p_prober bigint DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET handler_down_since = NULL, handler_down_reason = NULL,
                              handler_probe_at = NULL, handler_down_probes = 0
    WHERE t.id = p_tenant AND t.handler_down_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordo.wake_waiting(p_tenant, 'handler', p_prober);
    RETURN true;
END;
$$;
