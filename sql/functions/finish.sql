-- ordo.finish is a drain's one finish: it records steps done, for one
-- conversation (a drain alone) or for a batch's round (jobs/batch.go),
-- each row i behind its conversation's fence:
--
--   * step p_steps[i] of message p_messages[i] (seq p_seqs[i]) of
--     conversation p_convs[i] (fence p_fences[i]) is done, with the
--     provider's message id p_provider_ids[i] for a send; a send Meta
--     already reported undelivered is dead-lettered now, as the webhook
--     does for a done one (engine/webhooks.go);
--   * p_replies[i], a handler's replies (a JSON array; p_replies NULL:
--     none), become the message's next steps; p_pair_gap, when set, starts
--     the user's pair gap now (the caller passes it for a send);
--   * with p_last[i], the step was the message's last: the message is done
--     (dead when one of its sends was reported undelivered) and the head
--     moves to its seq. A conversation that caught up leaves the ready set
--     — under the row lock ingest takes, so a message accepted meanwhile
--     either committed first (not caught up) or finds no ready row and adds
--     one — and its drain lock is released.
--
-- What becomes of a conversation whose message finished and that has more
-- queued is p_then's:
--   * 'stay': the drain goes on with it (its lock held; the caller reads its
--     next message, ordo.next_step, in the same transaction);
--   * 'send': a batch's next round. When the tenant still batches
--     (ordo.may_batch for number p_phone: Meta may have paused the tenant or
--     throttled the number meanwhile) and the next message is an outbound
--     one not started, its send step is started (attempt 1, running) and
--     returned (next_*); otherwise it is released as for 'release';
--   * 'release': due again now (a notification tells the runners) and its
--     lock released, for a claim to take it: the run ends (its budget, its
--     turn, a stop), or a batch leaves a message that needs a full drain.
-- A step that was not its message's last stays with the drain.
--
-- A call of one conversation waits for its row and raises ORF01 when the
-- fence moved. A call of several takes the rows it can (SKIP LOCKED: never
-- waited for, so the order among them does not matter) and returns the
-- conversations it recorded; one it did not — its fence moved, or an
-- application's import holds its row — keeps its lock for the caller, who
-- finishes it in a call of its own.
--
-- released says the call let the conversation go (caught up, or
-- released). When it let go every conversation it was given, the session
-- is left the lease p_lease_ms (ordo.drain_lease; NULL: as it is):
-- 0 alone, the batch's while the session holds others of a batch.
-- since_accepted is how long ago the message was accepted, for the
-- accept-to-send metric. p_round is the room a batch holds for this call's
-- conversations; refill, on every row, is the part of it free after the
-- call once that is at least half, every conversation was recorded and
-- another of the tenant's conversations is due (0 otherwise): the caller
-- claims that many more into the batch (ordo.claim).
--
-- Locks: conversation rows FOR NO KEY UPDATE (ordo.check_fence's mode),
-- then steps, messages, dead letters and ready rows (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.finish(
    p_convs bigint[], p_fences bigint[], p_steps bigint[], p_provider_ids text[],
    p_messages bigint[], p_seqs bigint[], p_last boolean[], p_replies jsonb[], p_pair_gap interval,
    p_then text, p_lease_ms int, p_round int, p_phone text)
RETURNS TABLE (
    conv bigint, finished boolean, released boolean, since_accepted interval,
    next_message_pk bigint, next_message_id text, next_seq bigint, next_payload jsonb, next_step_id bigint,
    refill int)
LANGUAGE plpgsql
-- Reach the rows by their keys whatever the statistics say (without it
-- Postgres scanned steps and conversations whole for a batch of eight:
-- ordo.claim).
SET enable_seqscan = off
-- One plan per statement for the session, not one per call (ordo.claim).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_convs       bigint[];
    v_caught      bigint[] := '{}';
    v_more        bigint[];
    v_undelivered bigint[];
    v_next        bigint[] := '{}';
    v_next_steps  bigint[] := '{}';
    v_parked      bigint[] := '{}';
    v_tenant      bigint;
    v_left        int := 0;
BEGIN
    IF cardinality(p_convs) = 1 THEN
        WITH l AS (
            SELECT c.id FROM ordo.conversations c WHERE c.id = p_convs[1] AND c.fence = p_fences[1]
            FOR NO KEY UPDATE)
        SELECT array_agg(l.id) INTO v_convs FROM l;
        IF v_convs IS NULL THEN
            RAISE EXCEPTION 'stale fencing token % for conversation %', p_fences[1], p_convs[1] USING ERRCODE = 'ORF01';
        END IF;
    ELSE
        WITH l AS (
            SELECT c.id FROM ordo.conversations c
            JOIN unnest(p_convs, p_fences) AS f(conv, fence) ON c.id = f.conv AND c.fence = f.fence
            FOR NO KEY UPDATE OF c SKIP LOCKED)
        SELECT array_agg(l.id) INTO v_convs FROM l;
        IF v_convs IS NULL THEN
            RETURN;
        END IF;
    END IF;

    WITH h AS (
        UPDATE ordo.conversations c SET
            head_seq      = CASE WHEN f.last THEN f.seq ELSE c.head_seq END,
            pair_ready_at = CASE WHEN p_pair_gap IS NULL THEN c.pair_ready_at ELSE clock_timestamp() + p_pair_gap END
        FROM unnest(p_convs, p_seqs, p_last) AS f(conv, seq, last)
        WHERE c.id = f.conv AND f.conv = ANY (v_convs) AND (f.last OR p_pair_gap IS NOT NULL)
        RETURNING c.id, f.last AND c.last_seq = f.seq AS caught, f.last AS last, c.tenant_id)
    SELECT coalesce(array_agg(h.id) FILTER (WHERE h.caught), '{}'), array_agg(h.id) FILTER (WHERE h.last AND NOT h.caught),
           min(h.tenant_id)
    INTO v_caught, v_more, v_tenant FROM h;

    WITH s AS (
        UPDATE ordo.steps s SET status = 'done', provider_message_id = coalesce(f.pid, s.provider_message_id), finished_at = now()
        FROM unnest(p_convs, p_steps, p_provider_ids) AS f(conv, step, pid)
        WHERE s.id = f.step AND f.conv = ANY (v_convs)
        RETURNING s.id, s.provider_status = 'failed' AS undelivered)
    SELECT array_agg(s.id) FILTER (WHERE s.undelivered) INTO v_undelivered FROM s;
    IF v_undelivered IS NOT NULL THEN
        -- Meta's failed status beat the send's own answer here (the webhook
        -- found the step still running).
        PERFORM ordo.dead_letter_undelivered(v_undelivered);
    END IF;
    IF p_replies IS NOT NULL THEN
        INSERT INTO ordo.steps (message_pk, idx, kind, request)
        SELECT f.message, r.ord, 'send', r.reply
        FROM unnest(p_convs, p_messages, p_replies) AS f(conv, message, replies),
             jsonb_array_elements(f.replies) WITH ORDINALITY AS r(reply, ord)
        WHERE f.replies IS NOT NULL AND f.conv = ANY (v_convs)
        ON CONFLICT (message_pk, idx) DO NOTHING;
    END IF;

    UPDATE ordo.messages m SET finished_at = now(), status = CASE WHEN EXISTS (
        SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id AND s.status = 'failed') THEN 'dead' ELSE 'done' END
    FROM unnest(p_convs, p_messages, p_last) AS f(conv, message, last)
    WHERE m.id = f.message AND f.last AND f.conv = ANY (v_convs);

    IF v_more IS NOT NULL AND p_then = 'send' AND ordo.may_batch(v_tenant, p_phone) THEN
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
    IF v_more IS NOT NULL AND p_then <> 'stay' THEN
        SELECT coalesce(array_agg(x), '{}') INTO v_parked FROM unnest(v_more) x WHERE x <> ALL (v_next);
    END IF;
    -- A refill is worth its statement once half the batch's room is free
    -- and the tenant has a due conversation no drain holds (a held one,
    -- this call's own included, is due only after its lease); none while a conversation of this call is left to the
    -- caller (it may wait for an import's row lock: the batch should not
    -- wait too).
    IF p_round > 0 AND (p_round - cardinality(v_next)) * 2 >= p_round AND cardinality(v_convs) = cardinality(p_convs)
       AND EXISTS (SELECT 1 FROM ordo.ready r WHERE r.tenant_id = v_tenant AND r.due_at <= now()) THEN
        v_left := p_round - cardinality(v_next);
    END IF;

    RETURN QUERY
    SELECT f.conv, f.conv = ANY (v_caught), f.conv = ANY (v_caught) OR f.conv = ANY (v_parked),
           clock_timestamp() - m.created_at,
           s.message_pk, nm.message_id, nm.seq, nm.payload, s.id, v_left
    FROM unnest(p_convs, p_messages) AS f(conv, message)
    JOIN ordo.messages m ON m.id = f.message
    LEFT JOIN unnest(v_next, v_next_steps) AS n(conv, step) ON n.conv = f.conv
    LEFT JOIN ordo.steps s ON s.id = n.step
    LEFT JOIN ordo.messages nm ON nm.id = s.message_pk
    WHERE f.conv = ANY (v_convs);

    IF cardinality(v_caught) > 0 THEN
        DELETE FROM ordo.ready r WHERE r.conversation_pk = ANY (v_caught);
    END IF;
    IF cardinality(v_parked) > 0 THEN
        UPDATE ordo.ready r SET due_at = now(), running = false, woken = false WHERE r.conversation_pk = ANY (v_parked);
        PERFORM pg_notify('ordo_ready', v_tenant::text);
    END IF;
    -- A session lock is not transactional, but the next drain's takeover
    -- waits for this transaction's row locks, so it sees every write of
    -- this one. Set-based, the lease set once (ordo.drain_unlock would set
    -- it per conversation, a third of a batch's finish).
    PERFORM pg_advisory_unlock(k.ns, k.key) FROM unnest(v_caught || v_parked) x, ordo.drain_key(x) k;
    IF p_lease_ms IS NOT NULL AND cardinality(v_caught) + cardinality(v_parked) = cardinality(p_convs) THEN
        PERFORM ordo.drain_lease(p_lease_ms);
    END IF;
END;
$$;
