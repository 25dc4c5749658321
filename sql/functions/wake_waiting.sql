-- ordo.wake_waiting wakes the conversations of tenant p_tenant that wait
-- for what p_for names — 'sending' (paused_wait: its sending was paused),
-- 'handler' (handler_wait: its handler was unreachable) or 'number'
-- (number_wait: the Cloud API did not serve its number) — once that is
-- over (ordo.resume_sending, ordo.dependency_back), and clears their mark.
--
-- A drain marks its conversation (ordo.wait_for_dependency) holding the
-- row that says what is away FOR SHARE, and the caller updated that row
-- first: every mark is committed and seen here, or comes after and finds
-- it back. So no row is waited for: one another transaction holds (an
-- application's import, a drain's write) is skipped, and its conversation
-- looks again at its due time (at most jobs.HandlerProbeMax or
-- jobs.Config.PausedRecheck away). Waiting for it held the rows woken
-- before: an application that held it and asked for one of those was in
-- a cycle with this call until a 200 ms lock_timeout ended it, and another
-- transaction's deadlock check could fail inside that cycle (make chaos
-- seed 1, a claim waiting for the application's row:
-- TestWakingATenantHoldsNoRowWhileItWaits).
--
-- p_prober, when set, is the conversation whose running drain found the
-- dependency back (its probe was answered): its mark is cleared, but it is
-- not woken — its drain is at work, and a wake-up would cut short the wait
-- it records next for its own reasons (a handler's Retry-After, a backoff),
-- as ordo.park_conversation ends a woken drain's wait at once.
--
-- Locks: after the caller's tenant row or dependency row, each marked
-- conversation in ingest's order (only tried: SKIP LOCKED), then its ready
-- row (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.wake_waiting(p_tenant bigint, p_for text, p_prober bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_c record;
BEGIN
    FOR v_c IN
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = p_tenant
          AND CASE p_for WHEN 'sending' THEN c.paused_wait WHEN 'number' THEN c.number_wait ELSE c.handler_wait END
        ORDER BY c.conversation_id COLLATE "C"
        FOR NO KEY UPDATE OF c SKIP LOCKED
    LOOP
        UPDATE ordo.conversations c
        SET paused_wait  = c.paused_wait AND p_for <> 'sending',
            handler_wait = c.handler_wait AND p_for <> 'handler',
            number_wait  = c.number_wait AND p_for <> 'number'
        WHERE c.id = v_c.id;
        IF v_c.id IS DISTINCT FROM p_prober THEN
            PERFORM ordo.wake_conversation(v_c.id);
        END IF;
    END LOOP;
END;
$$;
