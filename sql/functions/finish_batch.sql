-- ordo.finish_batch records the sends of a batch ordo.claim_batch claimed
-- (jobs/batch.go): for each conversation p_convs[i] under fence p_fences[i],
-- send step p_steps[i] of message p_messages[i] (seq p_seqs[i]) is done with
-- provider id p_provider_ids[i], the message is done and the head moves to
-- its seq — what ordo.finish_step does for a message's last step, set-based.
-- A conversation that caught up leaves the ready set; one that got a message
-- meanwhile is due again at once (a notification tells the runners). Each
-- recorded conversation's advisory lock (first key p_lock) is released.
--
-- With p_end and every conversation recorded, the batch is over: the
-- session's lease ends (idle_session_timeout 0, ordo.batch_lease cleared).
-- It returns the conversations it recorded. One it did not — its fence
-- moved (ORF01 for the caller's one-conversation finish), or another
-- transaction holds its row (an application's import: the caller finishes
-- it alone, waiting for that row only) — keeps its lock for the caller.
--
-- Locks: the conversation rows FOR NO KEY UPDATE SKIP LOCKED in the lock
-- order (conversation_id, bytes), never waited for while others are held;
-- then steps, messages, dead letters (a send Meta already reported
-- undelivered, as in ordo.finish_step) and ready rows (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.finish_batch(
    p_lock int, p_convs bigint[], p_fences bigint[], p_steps bigint[], p_messages bigint[], p_seqs bigint[],
    p_provider_ids text[], p_end boolean)
RETURNS TABLE (conv bigint, finished boolean, since_accepted interval)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_convs       bigint[];
    v_caught      bigint[];
    v_more        bigint[];
    v_undelivered bigint[];
    v_tenant      bigint;
BEGIN
    WITH l AS (
        SELECT c.id FROM ordo.conversations c
        JOIN unnest(p_convs, p_fences) AS f(conv, fence) ON c.id = f.conv AND c.fence = f.fence
        ORDER BY c.conversation_id COLLATE "C"
        FOR NO KEY UPDATE OF c SKIP LOCKED),
    h AS (
        UPDATE ordo.conversations c SET head_seq = f.seq
        FROM l, unnest(p_convs, p_seqs) AS f(conv, seq)
        WHERE c.id = l.id AND f.conv = l.id
        RETURNING c.id, c.last_seq = f.seq AS caught, c.tenant_id)
    SELECT array_agg(h.id), array_agg(h.id) FILTER (WHERE h.caught), array_agg(h.id) FILTER (WHERE NOT h.caught), min(h.tenant_id)
    INTO v_convs, v_caught, v_more, v_tenant FROM h;
    IF v_convs IS NULL THEN
        RETURN;
    END IF;

    WITH s AS (
        UPDATE ordo.steps s SET status = 'done', provider_message_id = coalesce(f.pid, s.provider_message_id), finished_at = now()
        FROM unnest(p_convs, p_steps, p_provider_ids) AS f(conv, step, pid)
        WHERE s.id = f.step AND f.conv = ANY (v_convs)
        RETURNING s.id, s.provider_status = 'failed' AS undelivered)
    SELECT array_agg(s.id) FILTER (WHERE s.undelivered) INTO v_undelivered FROM s;
    IF v_undelivered IS NOT NULL THEN
        -- Meta's failed status beat the send's own answer (ordo.finish_step).
        PERFORM ordo.dead_letter_undelivered(v_undelivered);
    END IF;

    RETURN QUERY
    WITH m AS (
        UPDATE ordo.messages m SET finished_at = now(), status = CASE WHEN v_undelivered IS NOT NULL AND EXISTS (
            SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id AND s.status = 'failed') THEN 'dead' ELSE 'done' END
        FROM unnest(p_convs, p_messages) AS f(conv, message)
        WHERE m.id = f.message AND f.conv = ANY (v_convs)
        RETURNING m.conversation_pk, clock_timestamp() - m.created_at AS since)
    SELECT m.conversation_pk, m.conversation_pk = ANY (coalesce(v_caught, '{}')), m.since FROM m;

    IF v_caught IS NOT NULL THEN
        DELETE FROM ordo.ready r WHERE r.conversation_pk = ANY (v_caught);
    END IF;
    IF v_more IS NOT NULL THEN
        UPDATE ordo.ready r SET due_at = now(), running = false, woken = false WHERE r.conversation_pk = ANY (v_more);
        PERFORM pg_notify('ordo_ready', v_tenant::text);
    END IF;
    -- As in ordo.finish_step: the next drain's takeover waits for this
    -- transaction's row locks, so it sees every write of this one.
    PERFORM pg_advisory_unlock(p_lock, (x % 2147483647)::int) FROM unnest(v_convs) x;
    IF p_end AND cardinality(v_convs) = cardinality(p_convs) THEN
        PERFORM set_config('ordo.batch_lease', '', false), set_config('idle_session_timeout', '0', false);
    END IF;
END;
$$;
