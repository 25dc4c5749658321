-- ordo.wake_conversation makes conversation p_conv's drain run now: a drain
-- waiting (snoozed for a backoff, a send slot, a paused tenant or an async
-- handler's replies) is made due at once; a conversation with work and no
-- drain gets one; a drain running now is followed by a fresh one, which takes
-- the conversation once the running one lets go (so a wake-up that races the
-- running drain's decision to wait is never lost). It is what anything that
-- changes what a conversation waits for calls (replies posted, an operator's
-- resume) after its own writes, in the same transaction.
--
-- Locks: the conversation row (FOR NO KEY UPDATE), then its River job
-- (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.wake_conversation(p_conv bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_job bigint;
BEGIN
    SELECT c.drain_job_id INTO v_job FROM ordo.conversations c WHERE c.id = p_conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_job IS NULL THEN
        PERFORM ordo.ensure_drain(p_conv);
        RETURN;
    END IF;
    UPDATE ordo.river_job j SET state = 'available', scheduled_at = now()
    WHERE j.id = v_job AND j.state IN ('scheduled', 'available') AND j.scheduled_at > now();
    IF FOUND THEN
        PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
        RETURN;
    END IF;
    PERFORM ordo.ensure_drain(p_conv, v_job)
    FROM ordo.river_job j WHERE j.id = v_job AND j.state = 'running';
END;
$$;
