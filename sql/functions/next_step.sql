-- ordo.next_step reads conversation p_conv's next message after p_head with
-- its steps, as a drain's loop does after every message, and — when the
-- message is fresh (no steps yet) and its first step may start now — starts
-- that step in the same call (ordo.start_step: fence, send slot, attempt
-- recorded as running; started = true on its row). A drain sends it right
-- after finishing the message before, in one round trip and one transaction
-- where there were three: finish, read, start. A send starts here only when
-- the caller passes the phone number (it holds the tenant's credential);
-- everything else (a retry, an ambiguous send to settle, a send slot in the
-- future) is left to the drain, which then starts the step itself. When
-- the start was tried and may not go now (told: 'wait' for told_wait, a
-- send slot or pair gap ahead; 'paused'), the drain acts on that answer
-- rather than asking ordo.start_step the same question again (a paced
-- send asked twice for each wait for its slot).
-- ordo.claim calls it for the conversation it just took over.
CREATE OR REPLACE FUNCTION ordo.next_step(p_conv bigint, p_fence bigint, p_head bigint, p_tenant bigint, p_phone text)
RETURNS TABLE (
    message_pk bigint, message_id text, seq bigint, direction text, payload jsonb,
    step_id bigint, step_idx int, step_kind text, step_status text, step_request jsonb, step_attempts int,
    since_start interval, provider_status text, provider_message_id text, started boolean,
    told text, told_wait interval)
LANGUAGE plpgsql
-- The planner's defaults, whoever calls: ordo.claim walks its ready rows
-- with sorts and sequential scans off, and a step started under that (its
-- send slot, its counters) held the number's pacing row for longer while
-- it planned around them — every send of the number waited (a drain's
-- sends took 14 s where they take 8.5: TestConcurrentDuplicatesSentOnceInOrder).
SET enable_sort = on
SET enable_seqscan = on
AS $$
#variable_conflict use_column
DECLARE
    v_m     record;
    v_kind  text;
    v_req   jsonb;
    v_st    record;
    v_told  text;
    v_wait  interval;
BEGIN
    SELECT m.id, m.message_id, m.seq, m.direction, m.payload INTO v_m
    FROM ordo.messages m WHERE m.conversation_pk = p_conv AND m.seq > p_head
    ORDER BY m.seq LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = v_m.id) THEN
        IF v_m.direction = 'outbound' THEN
            v_kind := 'send';
            v_req := v_m.payload;
        ELSE
            v_kind := 'handle';
        END IF;
        IF v_kind = 'handle' OR p_phone IS NOT NULL THEN
            SELECT * INTO v_st FROM ordo.start_step(p_conv, p_fence, p_tenant, v_m.id, 0, v_kind, v_req,
                CASE WHEN v_kind = 'send' THEN p_phone END);
            v_told := v_st.verdict;
            v_wait := v_st.wait;
            IF v_st.verdict = 'go' THEN
                RETURN QUERY SELECT v_m.id, v_m.message_id, v_m.seq, v_m.direction, v_m.payload,
                    v_st.step_id, 0, v_kind, 'running'::text, v_req, v_st.attempts,
                    interval '0', NULL::text, NULL::text, true, NULL::text, NULL::interval;
                RETURN;
            END IF;
        END IF;
    END IF;
    RETURN QUERY SELECT v_m.id, v_m.message_id, v_m.seq, v_m.direction, v_m.payload,
        s.id, s.idx, s.kind, s.status, s.request, s.attempts,
        clock_timestamp() - s.started_at, s.provider_status, s.provider_message_id, false,
        v_told, v_wait
    FROM (SELECT 1) one LEFT JOIN ordo.steps s ON s.message_pk = v_m.id
    ORDER BY s.idx;
END;
$$;
