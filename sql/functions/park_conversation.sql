-- ordo.park_conversation ends a drain's run on conversation p_conv: a
-- conversation caught up (head_seq = last_seq: nothing after its head)
-- leaves the ready set — under the row lock ingest takes, so a message
-- accepted meanwhile either committed first (the conversation is not caught
-- up) or finds no ready row and adds one — and any other is due again after
-- p_delay (a backoff, a send slot, a paused tenant, a yield after the run's
-- budget: 0), or at once when something woke it while the drain ran
-- (ordo.wake_conversation), notifying the workers when due now. The drain's
-- lock is released with this call, leaving the session the lease p_lease_ms
-- (ordo.drain_unlock); the next drain's takeover waits for this row lock,
-- so it sees every write of this one. Fenced: a drain that lost the
-- conversation changes nothing (ORF01). A drain whose last write finished
-- its message ends in ordo.finish instead (caught up, or released after
-- its budget or turn).
--
-- Locks: the conversation row (ordo.check_fence), then the ready row.
CREATE OR REPLACE FUNCTION ordo.park_conversation(p_conv bigint, p_fence bigint, p_delay interval, p_lease_ms int)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_due    timestamptz;
    v_tenant bigint;
BEGIN
    PERFORM ordo.check_fence(p_conv, p_fence);
    PERFORM 1 FROM ordo.conversations c WHERE c.id = p_conv AND c.head_seq = c.last_seq;
    IF FOUND THEN
        DELETE FROM ordo.ready r WHERE r.conversation_pk = p_conv;
        PERFORM ordo.drain_unlock(p_conv, p_lease_ms);
        RETURN true;
    END IF;
    UPDATE ordo.ready r SET due_at = CASE WHEN r.woken THEN now() ELSE clock_timestamp() + p_delay END,
                            running = false, woken = false
    WHERE r.conversation_pk = p_conv
    RETURNING r.due_at, r.tenant_id INTO v_due, v_tenant;
    IF NOT FOUND THEN
        -- Only an operator's hand removes a running drain's row; put it back.
        INSERT INTO ordo.ready (conversation_pk, tenant_id, due_at)
        SELECT c.id, c.tenant_id, clock_timestamp() + p_delay FROM ordo.conversations c WHERE c.id = p_conv
        RETURNING due_at, tenant_id INTO v_due, v_tenant;
    END IF;
    IF v_due <= clock_timestamp() THEN
        PERFORM pg_notify('ordo_ready', v_tenant::text);
    END IF;
    PERFORM ordo.drain_unlock(p_conv, p_lease_ms);
    RETURN true;
END;
$$;
