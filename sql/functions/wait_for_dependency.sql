-- ordo.wait_for_dependency marks conversation p_conv (fenced by p_fence) as
-- waiting for what p_for names of its tenant p_tenant — 'handler' (its
-- handler unreachable: handler_wait), 'number' (the Cloud API not serving
-- its number: number_wait) or 'sending' (its sending paused: paused_wait,
-- and the send slot it held given up) — if that is still away, and answers
-- whether it is. False: it came back meanwhile, nothing is marked, and the
-- caller goes on at once instead of waiting.
--
-- The row that says it is away is read FOR SHARE first — the dependency's
-- (ordo.dependencies) for a handler or a number, the tenant's for its
-- sending — so the way back (ordo.dependency_back, ordo.resume_sending: an
-- update of that row, then ordo.wake_waiting) comes wholly before this
-- transaction, and is seen here, or wholly after it, and sees the mark.
-- Without it, a way back between a drain's "away, wait" and its mark found
-- nothing to wake, and the conversation waited out its park (a minute for
-- a handler; make chaos-ha).
--
-- Locks: the tenant row or the dependency's (FOR SHARE: it waits for a
-- write of it, never for an import's KEY SHARE), then the conversation row
-- (ordo.check_fence), sql/LOCKING.md. Fenced (ORF01).
CREATE OR REPLACE FUNCTION ordo.wait_for_dependency(p_tenant bigint, p_for text, p_conv bigint, p_fence bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_for = 'sending' THEN
        PERFORM 1 FROM ordo.tenants t WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL FOR SHARE;
    ELSE
        PERFORM 1 FROM ordo.dependencies d
        WHERE d.tenant_id = p_tenant AND d.what = p_for AND d.down_since IS NOT NULL FOR SHARE;
    END IF;
    IF NOT FOUND THEN
        PERFORM ordo.check_fence(p_conv, p_fence);
        RETURN false;
    END IF;
    PERFORM ordo.check_fence(p_conv, p_fence);
    UPDATE ordo.conversations c
    SET handler_wait = c.handler_wait OR p_for = 'handler',
        number_wait  = c.number_wait OR p_for = 'number',
        paused_wait  = c.paused_wait OR p_for = 'sending',
        send_slot_at = CASE WHEN p_for = 'sending' THEN NULL ELSE c.send_slot_at END
    WHERE c.id = p_conv;
    RETURN true;
END;
$$;
