-- The drain's writes, fewer and cheaper (issue 5, make bench):
--
--   ordo.start_step  checks the fence, takes a send slot (pacing, pair gap,
--                    paused tenant) and records the attempt as running, in
--                    that order and in one transaction;
--   ordo.finish_step records the step done and, after a message's last step,
--                    moves the head, ends the drain when that caught the
--                    conversation up, and releases the conversation's lock;
--   ordo.next_step   reads the conversation's next message and, when it is
--                    fresh and may start now, starts its first step — in the
--                    round trip of the previous message's finish, or of the
--                    takeover;
--
-- each one call (one round trip, one statement to plan) where each was a
-- batch of three to six statements. start_step and finish_step lock the
-- conversation row before anything else they touch, the order ingest takes
-- (conversation row, then the message), so neither can end up in a lock
-- cycle with ordo.enqueue_message.
--
-- Also: drain jobs carry their tenant (ordo.insert_drain_job), and the
-- conversation row's frequent updates are HOT (below).

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
    PERFORM ordo.check_fence(p_conv, p_fence);
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

-- ordo.next_step reads conversation p_conv's next message after p_head with
-- its steps, as a drain's loop does after every message, and — when the
-- message is fresh (no steps yet) and its first step may start now — starts
-- that step in the same call (ordo.start_step: fence, send slot, attempt
-- recorded as running; started = true on its row). A drain sends it right
-- after finishing the message before, in one round trip and one transaction
-- where there were three: finish, read, start. A send starts here only when
-- the caller passes the phone number (it holds the tenant's credential);
-- everything else (a retry, an ambiguous send to settle, a send slot in the
-- future) is left to the drain, which then starts the step itself.
--
-- In takeover mode (p_fence NULL):
--   * the takeover statement (jobs/session.go, openQuery) leaves the fence
--     it took in the transaction-local setting ordo.fence, and only when it
--     took the conversation's lock;
--   * ordo.next_step with p_fence NULL runs in that same transaction right
--     after it: it takes the head and the tenant from the conversation row
--     and starts only when ordo.fence is set and the conversation is not
--     halted; otherwise it only reads;
--   * drain jobs carry their conversation's tenant, so the drain can pass
--     the tenant's sending phone number (from its credential cache) before
--     it knows anything else about the conversation.
CREATE FUNCTION ordo.next_step(p_conv bigint, p_fence bigint, p_head bigint, p_tenant bigint, p_phone text)
RETURNS TABLE (
    message_pk bigint, message_id text, seq bigint, direction text, payload jsonb,
    step_id bigint, step_idx int, step_kind text, step_status text, step_request jsonb, step_attempts int,
    since_start interval, provider_status text, provider_message_id text, started boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_m     record;
    v_kind  text;
    v_req   jsonb;
    v_st    record;
    v_start boolean := true;
    v_halt  boolean;
BEGIN
    IF p_fence IS NULL THEN
        -- Right after the takeover, in its transaction.
        p_fence := nullif(current_setting('ordo.fence', true), '')::bigint;
        SELECT c.head_seq, c.tenant_id, c.halted_at IS NOT NULL INTO p_head, p_tenant, v_halt
        FROM ordo.conversations c WHERE c.id = p_conv;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        v_start := p_fence IS NOT NULL AND NOT v_halt;
    END IF;
    SELECT m.id, m.message_id, m.seq, m.direction, m.payload INTO v_m
    FROM ordo.messages m WHERE m.conversation_pk = p_conv AND m.seq > p_head
    ORDER BY m.seq LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_start AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = v_m.id) THEN
        IF v_m.direction = 'outbound' THEN
            v_kind := 'send';
            v_req := v_m.payload;
        ELSE
            v_kind := 'handle';
        END IF;
        IF v_kind = 'handle' OR p_phone IS NOT NULL THEN
            SELECT * INTO v_st FROM ordo.start_step(p_conv, p_fence, p_tenant, v_m.id, 0, v_kind, v_req,
                CASE WHEN v_kind = 'send' THEN p_phone END);
            IF v_st.verdict = 'go' THEN
                RETURN QUERY SELECT v_m.id, v_m.message_id, v_m.seq, v_m.direction, v_m.payload,
                    v_st.step_id, 0, v_kind, 'running'::text, v_req, v_st.attempts,
                    interval '0', NULL::text, NULL::text, true;
                RETURN;
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT v_m.id, v_m.message_id, v_m.seq, v_m.direction, v_m.payload,
        s.id, s.idx, s.kind, s.status, s.request, s.attempts,
        clock_timestamp() - s.started_at, s.provider_status, s.provider_message_id, false
    FROM (SELECT 1) one LEFT JOIN ordo.steps s ON s.message_pk = v_m.id
    ORDER BY s.idx;
END;
$$;

-- Drain jobs carry their conversation's tenant.
CREATE OR REPLACE FUNCTION ordo.insert_drain_job(conv bigint, job bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.river_job (id, args, kind, max_attempts, priority, queue, state, scheduled_at)
    SELECT job, jsonb_build_object('conversation', conv, 'tenant', c.tenant_id), 'ordo_drain', 25, 1, 'ordo', 'available', now()
    FROM ordo.conversations c WHERE c.id = conv;
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
END;
$$;

-- Let the conversation row's frequent updates be HOT (no new index entries):
-- seq (ingest), head (every finished message) and fence (takeover) change
-- many times per message, and conversations_orphan_idx's predicate names
-- last_seq and head_seq, which made each of those updates write a new entry
-- into every index of the table. The reconciler looks for orphans (work but
-- no drain: only a bug or an operator's hand makes one) with a scan instead,
-- every OrphanInterval (jobs.Config), not every ReconcileInterval. Free space
-- on each page keeps the updated row version on its page (a HOT condition).
DROP INDEX ordo.conversations_orphan_idx;
ALTER TABLE ordo.conversations SET (fillfactor = 70);
