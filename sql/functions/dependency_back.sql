-- ordo.dependency_back records that what tenant p_tenant depends on —
-- p_what: 'handler' (its handler answered again) or 'number' (the Cloud
-- API answered a send of its number: a success, or any answer that is not
-- an outage) — is back, and wakes the conversations that waited for it
-- (ordo.wake_waiting), which go on in order. False when it was not down.
--
-- p_prober is the conversation whose drain got the answer, if a drain did:
-- its mark goes, but it is not woken (ordo.wake_waiting).
--
-- Locks: the dependency's row, then ordo.wake_waiting's (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.dependency_back(p_tenant bigint, p_what text, p_prober bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.dependencies d SET down_since = NULL, down_reason = NULL, probe_at = NULL, probes = 0,
                                   fail_steps = NULL, fail_since = NULL, fail_base = NULL
    WHERE d.tenant_id = p_tenant AND d.what = p_what AND d.down_since IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM ordo.wake_waiting(p_tenant, p_what, p_prober);
    RETURN true;
END;
$$;
