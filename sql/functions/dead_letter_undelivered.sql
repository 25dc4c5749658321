-- ordo.dead_letter_undelivered dead-letters the messages of done send steps
-- (p_steps) that Meta's failed status said were never delivered: the step
-- failed, its message dead (unless later steps of it still run: the drain's
-- last finish then ends it dead), a dead letter with the step's error
-- history, whose last entry is the status's reason. Step, then message,
-- then dead letter (sql/LOCKING.md). Called by a webhook delivery
-- (engine/webhooks.go) for a step that was done, and by ordo.finish
-- when the status came before the send's own answer.
CREATE OR REPLACE FUNCTION ordo.dead_letter_undelivered(p_steps bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH st AS (
        UPDATE ordo.steps s SET status = 'failed'
        WHERE s.id = ANY(p_steps) AND s.status = 'done'
        RETURNING s.id, s.message_pk, s.errors
    ), m AS (
        UPDATE ordo.messages m SET status = 'dead' FROM st WHERE m.id = st.message_pk AND m.status = 'done'
        RETURNING m.id
    )
    INSERT INTO ordo.dead_letters (tenant_id, message_pk, step_id, reason, errors)
    SELECT msg.tenant_id, st.message_pk, st.id, coalesce(st.errors->-1->>'error', 'delivery failed'), st.errors
    FROM st JOIN ordo.messages msg ON msg.id = st.message_pk;
END;
$$;
