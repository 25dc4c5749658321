-- ordo.finish_batch records a round of a batched drain's sends
-- (jobs/batch.go): for each conversation p_convs[i] under fence p_fences[i],
-- send step p_steps[i] of message p_messages[i] (seq p_seqs[i]) is done with
-- provider id p_provider_ids[i], the message is done and the head moves to
-- its seq — what ordo.finish_step does for a message's last step, set-based.
--
-- Then each recorded conversation:
--   * caught up: leaves the ready set, and its drain lock is released;
--   * with more queued, p_next, the tenant still batched (ordo.may_batch
--     for number p_phone: Meta may have paused the tenant or throttled the
--     number meanwhile) and a next message that is outbound and not
--     started: that message's send step is started (attempt 1, running) and
--     returned (next_*): the conversation stays in the batch for the next
--     round, as a drain's finish reads and starts the next message
--     (ordo.next_step);
--   * otherwise with more queued: due again now (a notification tells the
--     runners) and released, for a claim to take it (a full drain for an
--     inbound message or a retry).
--
-- It returns the conversations it recorded. One it did not — its fence
-- moved (ORF01 for the caller's one-conversation finish), or another
-- transaction holds its row (an application's import: the caller finishes
-- it alone, waiting for that row only) — keeps its lock for the caller.
-- With p_end, every conversation recorded and none going on, the batch is
-- over: the session's lease ends (ordo.drain_lease 0); otherwise the batch's
-- lease stays for the conversations it still holds.
--
-- p_round is the room the batch holds for the conversations of this call
-- (theirs, and that of conversations that left it before); refill, on
-- every row, is the part of it free after this call once that is at least
-- half, and every conversation of the call was recorded (0 otherwise): the
-- caller claims that many more into the batch (ordo.claim, never one
-- alone), so a batch stays full while its run goes on, in claims worth
-- their cost.
--
-- Locks: the conversation rows FOR NO KEY UPDATE SKIP LOCKED — never waited
-- for, so the order among them does not matter — then steps, messages, dead
-- letters (a send Meta already reported undelivered, as in
-- ordo.finish_step) and ready rows (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.finish_batch(
    p_convs bigint[], p_fences bigint[], p_steps bigint[], p_messages bigint[], p_seqs bigint[],
    p_provider_ids text[], p_next boolean, p_end boolean, p_round int, p_phone text)
RETURNS TABLE (
    conv bigint, finished boolean, since_accepted interval,
    next_message_pk bigint, next_message_id text, next_seq bigint, next_payload jsonb, next_step_id bigint,
    refill int)
LANGUAGE plpgsql
-- Reach the batch's rows by their keys whatever the statistics say (without
-- them Postgres scanned steps and conversations whole for a batch of eight:
-- ordo.claim).
SET enable_seqscan = off
-- One plan per statement for the session, not one per call (ordo.claim):
-- planned again on every round, its statements cost more to plan than to
-- run for a round of one or two.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_convs       bigint[];
    v_caught      bigint[];
    v_more        bigint[];
    v_undelivered bigint[];
    v_done        bigint[];
    v_since       interval[];
    v_next        bigint[] := '{}';
    v_next_steps  bigint[] := '{}';
    v_parked      bigint[];
    v_tenant      bigint;
    v_left        int := 0;
BEGIN
    WITH l AS (
        SELECT c.id FROM ordo.conversations c
        JOIN unnest(p_convs, p_fences) AS f(conv, fence) ON c.id = f.conv AND c.fence = f.fence
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

    WITH m AS (
        UPDATE ordo.messages m SET finished_at = now(), status = CASE WHEN v_undelivered IS NOT NULL AND EXISTS (
            SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id AND s.status = 'failed') THEN 'dead' ELSE 'done' END
        FROM unnest(p_convs, p_messages) AS f(conv, message)
        WHERE m.id = f.message AND f.conv = ANY (v_convs)
        RETURNING m.conversation_pk, clock_timestamp() - m.created_at AS since)
    SELECT array_agg(m.conversation_pk), array_agg(m.since) INTO v_done, v_since FROM m;

    IF p_next AND v_more IS NOT NULL AND ordo.may_batch(v_tenant, p_phone) THEN
        WITH q AS (
            SELECT m.conversation_pk AS conv, m.id AS mpk, m.payload
            FROM unnest(p_convs, p_seqs) AS f(conv, seq)
            JOIN ordo.messages m ON m.conversation_pk = f.conv AND m.seq = f.seq + 1
            WHERE f.conv = ANY (v_more) AND m.direction = 'outbound'
              AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id)),
        st AS (
            INSERT INTO ordo.steps (message_pk, idx, kind, request, status, attempts, started_at)
            SELECT q.mpk, 0, 'send', q.payload, 'running', 1, now() FROM q
            RETURNING id, message_pk),
        ms AS (
            UPDATE ordo.messages m SET status = 'running' FROM q WHERE m.id = q.mpk AND m.status = 'queued')
        SELECT coalesce(array_agg(q.conv), '{}'), coalesce(array_agg(st.id), '{}') INTO v_next, v_next_steps
        FROM q JOIN st ON st.message_pk = q.mpk;
    END IF;
    SELECT array_agg(x) INTO v_parked FROM unnest(v_more) x WHERE x <> ALL (v_next);
    -- A refill is worth its statement once half the batch's room is free;
    -- none while a conversation of this call is left to the caller (it
    -- may wait for an import's row lock: the batch should not wait too).
    IF (p_round - cardinality(v_next)) * 2 >= p_round AND cardinality(v_convs) = cardinality(p_convs) THEN
        v_left := p_round - cardinality(v_next);
    END IF;

    RETURN QUERY
    SELECT d.conv, d.conv = ANY (coalesce(v_caught, '{}')), d.since, s.message_pk, nm.message_id, nm.seq, nm.payload, s.id,
           v_left
    FROM unnest(v_done, v_since) AS d(conv, since)
    LEFT JOIN unnest(v_next, v_next_steps) AS n(conv, step) ON n.conv = d.conv
    LEFT JOIN ordo.steps s ON s.id = n.step
    LEFT JOIN ordo.messages nm ON nm.id = s.message_pk;

    IF v_caught IS NOT NULL THEN
        DELETE FROM ordo.ready r WHERE r.conversation_pk = ANY (v_caught);
    END IF;
    IF v_parked IS NOT NULL THEN
        UPDATE ordo.ready r SET due_at = now(), running = false, woken = false WHERE r.conversation_pk = ANY (v_parked);
        PERFORM pg_notify('ordo_ready', v_tenant::text);
    END IF;
    -- As in ordo.finish_step: the next drain's takeover waits for this
    -- transaction's row locks, so it sees every write of this one.
    -- Set-based: the batch's lease stays as it is for the rest (each
    -- ordo.drain_unlock would set it again, a third of this call's time).
    PERFORM pg_advisory_unlock(k.ns, k.key) FROM unnest(v_convs) x, ordo.drain_key(x) k WHERE x <> ALL (v_next);
    IF p_end AND cardinality(v_convs) = cardinality(p_convs) AND cardinality(v_next) = 0 THEN
        PERFORM ordo.drain_lease(0);
    END IF;
END;
$$;
