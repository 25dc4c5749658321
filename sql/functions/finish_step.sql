-- ordo.finish_step records step p_step done (p_provider_id: the provider's
-- message id, for a send) and inserts a handler's replies (p_replies, a JSON
-- array) as the message's next steps. With p_last, p_step was the message's
-- last step: the message is done and the head moves to p_seq; when that
-- caught the conversation up (finished), the drain ends and the conversation
-- leaves the ready set — under the row lock ingest takes, so a message
-- accepted meanwhile either committed first (the drain goes on) or finds no
-- row and adds one — and the drain's lock is released with this
-- transaction (unlocked), leaving the session the lease p_lease_ms
-- (ordo.drain_unlock). p_pair_gap, when set, starts the user's pair gap now.
-- since_accepted (p_last only) is how long ago the message was accepted,
-- for the accept-to-send metric, read by the write that finishes it.
CREATE OR REPLACE FUNCTION ordo.finish_step(
    p_conv bigint, p_fence bigint, p_lease_ms int, p_step bigint, p_provider_id text,
    p_message bigint, p_seq bigint, p_last boolean, p_replies jsonb, p_pair_gap interval,
    OUT finished boolean, OUT unlocked boolean, OUT since_accepted interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_undelivered boolean;
BEGIN
    finished := false;
    unlocked := false;
    IF p_last THEN
        UPDATE ordo.conversations c SET
            head_seq      = p_seq,
            pair_ready_at = CASE WHEN p_pair_gap IS NULL THEN c.pair_ready_at ELSE clock_timestamp() + p_pair_gap END
        WHERE c.id = p_conv AND c.fence = p_fence
        RETURNING c.last_seq = p_seq INTO finished;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'stale fencing token % for conversation %', p_fence, p_conv USING ERRCODE = 'ORF01';
        END IF;
    ELSE
        PERFORM ordo.check_fence(p_conv, p_fence);
        IF p_pair_gap IS NOT NULL THEN
            UPDATE ordo.conversations c SET pair_ready_at = clock_timestamp() + p_pair_gap WHERE c.id = p_conv;
        END IF;
    END IF;

    UPDATE ordo.steps s SET status = 'done', provider_message_id = coalesce(p_provider_id, s.provider_message_id), finished_at = now()
    WHERE s.id = p_step
    RETURNING s.provider_status = 'failed' INTO v_undelivered;
    IF v_undelivered THEN
        -- Meta's failed status beat the send's own answer here (the webhook
        -- found the step still running): the step is dead-lettered now, as
        -- the webhook does for a done one (engine/webhooks.go).
        PERFORM ordo.dead_letter_undelivered(ARRAY[p_step]);
    END IF;
    IF p_replies IS NOT NULL THEN
        INSERT INTO ordo.steps (message_pk, idx, kind, request)
        SELECT p_message, r.ord, 'send', r.reply FROM jsonb_array_elements(p_replies) WITH ORDINALITY AS r(reply, ord)
        ON CONFLICT (message_pk, idx) DO NOTHING;
    END IF;
    IF p_last THEN
        -- dead when one of its sends was reported undelivered.
        UPDATE ordo.messages m SET finished_at = now(), status = CASE WHEN EXISTS (
            SELECT 1 FROM ordo.steps s WHERE s.message_pk = p_message AND s.status = 'failed') THEN 'dead' ELSE 'done' END
        WHERE m.id = p_message
        RETURNING clock_timestamp() - m.created_at INTO since_accepted;
        IF finished THEN
            -- Out of the ready set, under the conversation row's lock that
            -- ingest takes before it adds the row again.
            DELETE FROM ordo.ready r WHERE r.conversation_pk = p_conv;
            -- A session lock is not transactional, but the next drain's
            -- takeover waits for this transaction's row lock, so it still
            -- sees every write of this one.
            unlocked := ordo.drain_unlock(p_conv, p_lease_ms);
        END IF;
    END IF;
END;
$$;
