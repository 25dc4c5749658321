-- ordo.prune_messages removes the content of up to batch of tenant's
-- finished messages created before horizon and finished before finished_by
-- (retention passes the same time twice; a purge passes 'infinity'): their payload (set
-- to NULL), their steps (requests, errors, provider ids and statuses), their
-- resolved dead letters and the sandbox sends their steps made. The message
-- row stays: it is the dedupe record (tenant, message_id, conversation, seq,
-- status), kept for ever. It leaves alone a message that is not finished, is
-- not below its conversation's head (a halted conversation's dead message is
-- at head + 1) or has an open dead letter. more is true when the batch was
-- full: call again.
--
-- Locks: the message rows it prunes (FOR UPDATE SKIP LOCKED, so a drain or
-- an operator holding one is passed over, never waited for), then their steps
-- and dead letters; the conversation row is read, never locked. That is the
-- engine's order (conversation → message → step) with its first link left
-- out; a pruned message is finished and below the head, so no drain writes it.
CREATE OR REPLACE FUNCTION ordo.prune_messages(tenant bigint, horizon timestamptz, finished_by timestamptz, batch int DEFAULT 1000)
RETURNS TABLE (messages int, steps int, dead_letters int, sandbox_sends int, more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_bound bigint;
    v_ids   bigint[];
BEGIN
    -- Ids grow with time: the first message with content created after the
    -- horizon bounds the scan, so the recent ones (most of what has content)
    -- are not read at all (messages_unpruned_idx).
    SELECT m.id INTO v_bound FROM ordo.messages m
    WHERE m.tenant_id = tenant AND m.payload IS NOT NULL AND m.created_at >= horizon
    ORDER BY m.id LIMIT 1;

    SELECT array_agg(x.id) INTO v_ids FROM (
        SELECT m.id FROM ordo.messages m
        JOIN ordo.conversations c ON c.id = m.conversation_pk
        WHERE m.tenant_id = tenant AND m.payload IS NOT NULL
          AND m.id < coalesce(v_bound, 9223372036854775807)
          AND m.created_at < horizon AND m.finished_at < finished_by
          AND m.status IN ('done', 'dead', 'skipped')
          AND m.seq <= c.head_seq
          AND NOT EXISTS (SELECT 1 FROM ordo.dead_letters d WHERE d.message_pk = m.id AND d.resolved_at IS NULL)
        ORDER BY m.id LIMIT batch
        FOR UPDATE OF m SKIP LOCKED) x;

    messages := coalesce(cardinality(v_ids), 0);
    more := messages = batch;
    IF messages = 0 THEN
        steps := 0; dead_letters := 0; sandbox_sends := 0;
        RETURN NEXT;
        RETURN;
    END IF;

    DELETE FROM ordo.sandbox_sends b USING ordo.steps s
    WHERE s.message_pk = ANY (v_ids) AND s.provider_message_id = b.wamid;
    GET DIAGNOSTICS sandbox_sends = ROW_COUNT;
    DELETE FROM ordo.dead_letters d WHERE d.message_pk = ANY (v_ids);
    GET DIAGNOSTICS dead_letters = ROW_COUNT;
    DELETE FROM ordo.steps s WHERE s.message_pk = ANY (v_ids);
    GET DIAGNOSTICS steps = ROW_COUNT;
    UPDATE ordo.messages m SET payload = NULL WHERE m.id = ANY (v_ids);
    RETURN NEXT;
END;
$$;
