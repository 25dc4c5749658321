-- ordo.finish_drain ends a drain whose conversation p_conv (fenced by
-- p_fence) has nothing left after its head: under the row lock ingest
-- takes, the conversation leaves the ready set and the drain's lock is
-- released, leaving the session the lease p_lease_ms (ordo.drain_unlock).
-- A message committed before this call makes the conversation not caught
-- up: false, nothing changes, and the drain goes on with it; one committed
-- after finds no ready row and adds one. The next drain's takeover waits
-- for this row lock, so it sees every write of this one. A drain whose last
-- write finished its message does this in ordo.finish_step.
--
-- Locks: the conversation row (ordo.check_fence; ORF01 when stale), then
-- the ready row.
CREATE OR REPLACE FUNCTION ordo.finish_drain(p_conv bigint, p_fence bigint, p_lease_ms int)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ordo.check_fence(p_conv, p_fence);
    PERFORM 1 FROM ordo.conversations c WHERE c.id = p_conv AND c.head_seq = c.last_seq;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM ordo.ready r WHERE r.conversation_pk = p_conv;
    PERFORM ordo.drain_unlock(p_conv, p_lease_ms);
    RETURN true;
END;
$$;
