-- Back to 000014: 000013's ordo.insert_drain_job, the orphan index, no
-- step functions.
ALTER TABLE ordo.conversations RESET (fillfactor);
CREATE INDEX conversations_orphan_idx ON ordo.conversations (id)
    WHERE drain_job_id IS NULL AND head_seq < last_seq AND halted_at IS NULL;

CREATE OR REPLACE FUNCTION ordo.insert_drain_job(conv bigint, job bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.river_job (id, args, kind, max_attempts, priority, queue, state, scheduled_at)
    VALUES (job, jsonb_build_object('conversation', conv), 'ordo_drain', 25, 1, 'ordo', 'available', now());
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
END;
$$;

DROP FUNCTION ordo.next_step(bigint, bigint, bigint, bigint, text);
DROP FUNCTION ordo.finish_step(bigint, bigint, int, bigint, text, bigint, bigint, boolean, jsonb, interval);
DROP FUNCTION ordo.start_step(bigint, bigint, bigint, bigint, int, text, jsonb, text);
