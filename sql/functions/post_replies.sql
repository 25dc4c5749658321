-- ordo.post_replies leaves the replies (p_replies, a JSON array already
-- checked against the WhatsApp message schema) posted by tenant p_tenant's
-- async handler for its inbound message p_message_id on the message's
-- handle step, and wakes the conversation: its drain turns them into the
-- message's send steps (jobs/replies.go). For a tenant in handler_mode
-- async it accepts them from the moment the handler was called until the
-- replies are settled — also while the call is still in flight (a workflow
-- that answered "started" and posted before the drain recorded the answer),
-- or after a failed attempt (the workflow ran after all: it is not called
-- again) — and in sync mode once the handler answered 202; also while the
-- drain parks the conversation (ordo.wake_conversation marks a running
-- drain's wait to end at once).
--
-- verdict: 'accepted'; 'duplicate' (these very replies were posted before);
-- 'not_found' (no such message of the tenant); 'conflict' (other replies
-- were posted before); 'not_waiting' with reason (not an inbound message,
-- handler not called yet, already answered or dead, notify mode, sync mode
-- without a 202).
--
-- Locks: the conversation row (FOR NO KEY UPDATE, as a drain's writes), then
-- the handle step, then (wake) the ready row: sql/LOCKING.md. The drain's
-- writes take the conversation row first too, so a drain that reads the
-- step after this commits sees the replies, and one that wrote before it
-- (the step now 'waiting') is woken.
CREATE OR REPLACE FUNCTION ordo.post_replies(p_tenant bigint, p_message_id text, p_replies jsonb,
    OUT verdict text, OUT reason text, OUT message_pk bigint, OUT replies int)
LANGUAGE plpgsql AS $$
DECLARE
    v_m  record;
    v_st record;
    v_mode text;
    v_found boolean;
BEGIN
    replies := jsonb_array_length(p_replies);
    SELECT m.id, m.conversation_pk, m.direction, m.status INTO v_m
    FROM ordo.messages m WHERE m.tenant_id = p_tenant AND m.message_id = p_message_id;
    IF NOT FOUND THEN
        verdict := 'not_found';
        RETURN;
    END IF;
    message_pk := v_m.id;
    IF v_m.direction <> 'inbound' THEN
        verdict := 'not_waiting';
        reason := 'is an outbound message: only an inbound message''s handler posts replies';
        RETURN;
    END IF;
    PERFORM 1 FROM ordo.conversations c WHERE c.id = v_m.conversation_pk FOR NO KEY UPDATE;
    SELECT s.id, s.status, s.attempts, s.replies INTO v_st
    FROM ordo.steps s WHERE s.message_pk = v_m.id AND s.idx = 0 AND s.kind = 'handle'
    FOR UPDATE;
    v_found := FOUND;
    IF v_found AND v_st.replies IS NOT NULL THEN
        verdict := CASE WHEN v_st.replies = p_replies THEN 'duplicate' ELSE 'conflict' END;
        RETURN;
    END IF;
    SELECT t.handler_mode INTO v_mode FROM ordo.tenants t WHERE t.id = p_tenant;
    verdict := 'not_waiting';
    IF v_mode = 'notify' THEN
        reason := 'the tenant''s handler_mode is notify: its workflow sends through POST /v1/messages';
    ELSIF NOT v_found OR v_st.attempts = 0 OR v_m.status NOT IN ('queued', 'running') THEN
        reason := CASE WHEN v_m.status IN ('done', 'dead', 'skipped')
                       THEN 'is ' || v_m.status || ': its replies are settled'
                       ELSE 'is not waiting for replies: its handler has not been called yet' END;
    ELSIF v_st.status IN ('done', 'failed') THEN
        reason := 'is not waiting for replies: its handler already answered';
    ELSIF v_mode = 'sync' AND v_st.status <> 'waiting' THEN
        -- A sync answer carries the replies: accepted now, these could be
        -- overridden by it. Once the handler answered 202 they are taken.
        reason := 'is not waiting for replies: the tenant''s handler_mode is sync and its handler has not answered 202 (yet)';
    ELSE
        UPDATE ordo.steps s SET replies = p_replies WHERE s.id = v_st.id;
        PERFORM ordo.wake_conversation(v_m.conversation_pk);
        verdict := 'accepted';
        reason := NULL;
    END IF;
END;
$$;
