-- A drain's two writes per step, each one call (one round trip, one
-- statement to plan) where each was a batch of three to six statements:
--
--   ordo.start_step  checks the fence, takes a send slot (pacing, pair gap,
--                    paused tenant) and records the attempt as running, in
--                    that order and in one transaction;
--   ordo.finish_step records the step done and, after a message's last step,
--                    moves the head, ends the drain when that caught the
--                    conversation up, and releases the conversation's lock.
--
-- Both lock the conversation row before anything else they touch, the order
-- ingest takes (conversation row, then the message), so neither can end up
-- in a lock cycle with ordo.enqueue_message.


-- ordo.start_step starts an attempt of step p_idx of message p_message.
-- p_phone is the sending phone number for a send step (NULL for handle).
-- verdict 'go': the attempt is recorded (step_id, attempts) and may run now;
-- 'wait': not before wait from now (the slot is kept on the conversation,
-- so calling again then gets it); 'paused': the tenant's sending is paused.
CREATE FUNCTION ordo.start_step(
    p_conv bigint, p_fence bigint, p_tenant bigint, p_message bigint,
    p_idx int, p_kind text, p_request jsonb, p_phone text,
    OUT verdict text, OUT wait interval, OUT step_id bigint, OUT attempts int)
LANGUAGE plpgsql AS $$
BEGIN
    -- KEY SHARE to commit: a takeover (FOR UPDATE) waits for this attempt
    -- and then sees it.
    PERFORM 1 FROM ordo.conversations c WHERE c.id = p_conv AND c.fence = p_fence FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', p_fence, p_conv USING ERRCODE = 'ORF01';
    END IF;
    IF p_phone IS NOT NULL THEN
        -- Horizon 0: a slot in the future is kept on the conversation
        -- (send_slot_at) and handed back by the next call, so waiting for
        -- it never costs the number a second slot.
        SELECT r.verdict, r.wait INTO verdict, wait
        FROM ordo.reserve_send(p_tenant, p_conv, p_fence, p_phone, interval '0') r;
        IF verdict <> 'go' THEN
            RETURN;
        END IF;
    END IF;
    verdict := 'go';
    INSERT INTO ordo.steps AS s (message_pk, idx, kind, request, status, attempts, started_at)
    VALUES (p_message, p_idx, p_kind, p_request, 'running', 1, now())
    ON CONFLICT (message_pk, idx) DO UPDATE SET status = 'running', attempts = s.attempts + 1, started_at = now()
    RETURNING s.id, s.attempts INTO step_id, attempts;
    UPDATE ordo.messages m SET status = 'running' WHERE m.id = p_message AND m.status = 'queued';
END;
$$;

-- ordo.finish_step records step p_step done (p_provider_id: the provider's
-- message id, for a send) and inserts a handler's replies (p_replies, a JSON
-- array) as the message's next steps. With p_last, p_step was the message's
-- last step: the message is done and the head moves to p_seq; when that
-- caught the conversation up (finished), the drain ends — under the row lock
-- ingest takes, so a message accepted meanwhile either committed first (the
-- drain goes on) or finds no drain and schedules one — and the lock p_lock
-- (the advisory lock's first key) is released with this transaction
-- (unlocked). p_pair_gap, when set, starts the user's pair gap now.
CREATE FUNCTION ordo.finish_step(
    p_conv bigint, p_fence bigint, p_lock int, p_step bigint, p_provider_id text,
    p_message bigint, p_seq bigint, p_last boolean, p_replies jsonb, p_pair_gap interval,
    OUT finished boolean, OUT unlocked boolean)
LANGUAGE plpgsql AS $$
BEGIN
    finished := false;
    unlocked := false;
    IF p_last THEN
        UPDATE ordo.conversations c SET
            head_seq      = p_seq,
            drain_job_id  = CASE WHEN c.last_seq = p_seq THEN NULL ELSE c.drain_job_id END,
            pair_ready_at = CASE WHEN p_pair_gap IS NULL THEN c.pair_ready_at ELSE clock_timestamp() + p_pair_gap END
        WHERE c.id = p_conv AND c.fence = p_fence
        RETURNING c.last_seq = p_seq INTO finished;
    ELSIF p_pair_gap IS NOT NULL THEN
        UPDATE ordo.conversations c SET pair_ready_at = clock_timestamp() + p_pair_gap
        WHERE c.id = p_conv AND c.fence = p_fence;
    ELSE
        PERFORM 1 FROM ordo.conversations c WHERE c.id = p_conv AND c.fence = p_fence FOR KEY SHARE;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', p_fence, p_conv USING ERRCODE = 'ORF01';
    END IF;

    UPDATE ordo.steps s SET status = 'done', provider_message_id = coalesce(p_provider_id, s.provider_message_id), finished_at = now()
    WHERE s.id = p_step;
    IF p_replies IS NOT NULL THEN
        INSERT INTO ordo.steps (message_pk, idx, kind, request)
        SELECT p_message, r.ord, 'send', r.reply FROM jsonb_array_elements(p_replies) WITH ORDINALITY AS r(reply, ord)
        ON CONFLICT (message_pk, idx) DO NOTHING;
    END IF;
    IF p_last THEN
        UPDATE ordo.messages m SET status = 'done', finished_at = now() WHERE m.id = p_message;
        IF finished THEN
            -- A session lock is not transactional, but the next drain's
            -- takeover waits for this transaction's row lock, so it still
            -- sees every write of this one.
            unlocked := pg_advisory_unlock(p_lock, (p_conv % 2147483647)::int);
            PERFORM set_config('idle_session_timeout', '0', false);
        END IF;
    END IF;
END;
$$;
