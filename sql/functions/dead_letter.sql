-- ordo.dead_letter ends message p_message of conversation p_conv (under
-- fence p_fence) in a dead letter: its step p_step failed for good (p_entry,
-- a JSON array, appended to the step's error history), the message is dead,
-- the dead letter holds the step's whole history and p_reason, and the
-- conversation halts (p_halt: it leaves the ready set until an operator's
-- ordo.resolve_dead_letter) or goes on past it (the skip policy: its head
-- moves to p_seq). The drain's transition out of running into halted
-- (sql/LIFECYCLE.md), in one call.
--
-- Locks (sql/LOCKING.md): the conversation row (ordo.check_fence: a stale
-- drain changes nothing, ORF01), then the step, the message, the dead
-- letter and the ready row.
CREATE OR REPLACE FUNCTION ordo.dead_letter(
    p_conv bigint, p_fence bigint, p_tenant bigint, p_message bigint, p_seq bigint, p_step bigint,
    p_reason text, p_entry jsonb, p_halt boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ordo.check_fence(p_conv, p_fence);
    UPDATE ordo.steps s SET status = 'failed', errors = s.errors || p_entry, finished_at = now() WHERE s.id = p_step;
    UPDATE ordo.messages m SET status = 'dead', finished_at = now() WHERE m.id = p_message;
    INSERT INTO ordo.dead_letters (tenant_id, message_pk, step_id, reason, errors)
    SELECT p_tenant, p_message, s.id, p_reason, s.errors FROM ordo.steps s WHERE s.id = p_step;
    IF p_halt THEN
        UPDATE ordo.conversations c SET halted_at = now() WHERE c.id = p_conv;
        DELETE FROM ordo.ready r WHERE r.conversation_pk = p_conv;
    ELSE
        UPDATE ordo.conversations c SET head_seq = p_seq WHERE c.id = p_conv;
    END IF;
END;
$$;
