-- ordo.wake_waiting wakes the conversations of tenant p_tenant that wait
-- for what p_for names — 'sending' (paused_wait: its sending was paused),
-- 'handler' (handler_wait: its handler was unreachable) or 'number'
-- (number_wait: the Cloud API did not serve its number) — once that is
-- over (ordo.resume_sending, ordo.dependency_back), and clears their mark.
--
-- A drain that finds the tenant paused or its handler away marks its
-- conversation in a transaction that holds the conversation row. So that
-- no mark is missed, every conversation of the tenant in the ready set is
-- taken in turn, and one a drain holds is waited for: its write takes
-- milliseconds, and its mark is then seen. But an application's
-- transaction may hold several of the tenant's conversations, taken in its
-- own order, and waiting for those deadlocked with it (the chaos run, seed
-- 1): a row held longer than 200 ms (lock_timeout) is skipped, and its
-- conversation looks again at its due time (at most jobs.HandlerProbeMax
-- or jobs.Config.PausedRecheck away).
--
-- p_prober, when set, is the conversation whose running drain found the
-- dependency back (its probe was answered): its mark is cleared, but it is
-- not woken — its drain is at work, and a wake-up would cut short the wait
-- it records next for its own reasons (a handler's Retry-After, a backoff),
-- as ordo.park_conversation ends a woken drain's wait at once.
--
-- Locks: after the caller's tenant row or dependency row, each
-- conversation in ingest's order (waiting at most 200 ms for each), then
-- its ready row (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.wake_waiting(p_tenant bigint, p_for text, p_prober bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_c       record;
    v_timeout text := current_setting('lock_timeout');
BEGIN
    FOR v_c IN
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = p_tenant
          AND (CASE p_for WHEN 'sending' THEN c.paused_wait WHEN 'number' THEN c.number_wait ELSE c.handler_wait END
               OR EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id))
        ORDER BY c.conversation_id COLLATE "C"
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            PERFORM 1 FROM ordo.conversations c
            WHERE c.id = v_c.id AND CASE p_for WHEN 'sending' THEN c.paused_wait WHEN 'number' THEN c.number_wait ELSE c.handler_wait END
            FOR NO KEY UPDATE;
            IF FOUND THEN
                UPDATE ordo.conversations c
                SET paused_wait  = c.paused_wait AND p_for <> 'sending',
                    handler_wait = c.handler_wait AND p_for <> 'handler',
                    number_wait  = c.number_wait AND p_for <> 'number'
                WHERE c.id = v_c.id;
                IF v_c.id IS DISTINCT FROM p_prober THEN
                    PERFORM ordo.wake_conversation(v_c.id);
                END IF;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            NULL; -- held by a longer transaction: its due time wakes it
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_timeout, true);
END;
$$;
