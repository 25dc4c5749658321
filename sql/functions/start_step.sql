-- ordo.start_step starts an attempt of step p_idx of message p_message.
-- p_phone is the sending phone number for a send step (NULL for handle).
-- verdict 'go': the attempt is recorded (step_id, attempts) and may run now;
-- 'wait': not before wait from now (the slot is kept on the conversation,
-- so calling again then gets it); 'paused': the tenant's sending is paused.
CREATE OR REPLACE FUNCTION ordo.start_step(
    p_conv bigint, p_fence bigint, p_tenant bigint, p_message bigint,
    p_idx int, p_kind text, p_request jsonb, p_phone text,
    OUT verdict text, OUT wait interval, OUT step_id bigint, OUT attempts int)
LANGUAGE plpgsql AS $$
BEGIN
    -- The conversation row first (sql/LOCKING.md), held to commit: a
    -- takeover (FOR UPDATE) waits for this attempt and then sees it, and
    -- reserve_send's write of the slot needs no upgrade after it locked the
    -- number's send_pacing row. For a send, ordo.reserve_send takes it (and
    -- checks the fence) in the statement that reads the pacing state.
    IF p_phone IS NULL THEN
        PERFORM ordo.check_fence(p_conv, p_fence);
    ELSE
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
    -- A first attempt inserts; a later one (the row is there) updates. Not
    -- one INSERT … ON CONFLICT DO UPDATE: that statement runs the steps'
    -- statement triggers for updates (ordo.stats_on_step,
    -- ordo.event_on_step) even when it inserts, on every first attempt.
    INSERT INTO ordo.steps AS s (message_pk, idx, kind, request, status, attempts, started_at)
    VALUES (p_message, p_idx, p_kind, p_request, 'running', 1, clock_timestamp())
    ON CONFLICT (message_pk, idx) DO NOTHING
    RETURNING s.id, s.attempts INTO step_id, attempts;
    IF NOT FOUND THEN
        UPDATE ordo.steps s SET status = 'running', attempts = s.attempts + 1, started_at = clock_timestamp()
        WHERE s.message_pk = p_message AND s.idx = p_idx
        RETURNING s.id, s.attempts INTO step_id, attempts;
    END IF;
    UPDATE ordo.messages m SET status = 'running' WHERE m.id = p_message AND m.status = 'queued';
END;
$$;
