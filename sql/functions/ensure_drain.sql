-- ordo.ensure_drain is the one place a conversation's drain job is
-- re-scheduled (reconciler, replay, resume; ingest claims its drain in
-- ordo.enqueue_message's own upsert). It schedules one unless the
-- conversation is halted, has nothing to do, or already expects a drain
-- (drain_job_id set and not the job being replaced). Replacing a dead job on
-- a conversation with nothing to do clears it. The job's row is shaped by
-- ordo.insert_drain_job. Returns the new job's id, or NULL.
CREATE OR REPLACE FUNCTION ordo.ensure_drain(conv bigint, replacing bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_c   record;
    v_job bigint;
BEGIN
    SELECT c.drain_job_id, c.halted_at, c.head_seq, c.last_seq INTO v_c
    FROM ordo.conversations c WHERE c.id = conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_c.drain_job_id IS NOT NULL AND v_c.drain_job_id IS DISTINCT FROM replacing THEN
        RETURN NULL;
    END IF;
    IF v_c.halted_at IS NOT NULL OR v_c.head_seq >= v_c.last_seq THEN
        IF v_c.drain_job_id IS NOT NULL THEN
            UPDATE ordo.conversations c SET drain_job_id = NULL WHERE c.id = conv;
        END IF;
        RETURN NULL;
    END IF;
    v_job := nextval('ordo.river_job_id_seq');
    PERFORM ordo.insert_drain_job(conv, v_job);
    UPDATE ordo.conversations c SET drain_job_id = v_job WHERE c.id = conv;
    RETURN v_job;
END;
$$;
