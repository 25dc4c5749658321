-- ordo.claim_batch claims, for the calling session, up to p_max of tenant
-- p_tenant's due conversations whose next message is outbound and not
-- started, and starts each one's send: the batched drain (jobs/batch.go).
-- Claimed one at a time, a conversation cost a transaction of five
-- statements (issue 11, `make bench` spread); here a batch costs one: the
-- takeover (fence bumped under FOR UPDATE, ready row running and due after
-- the lease), the step's start (attempt 1, running) and the message's
-- status, set-based.
--
-- Only what needs nothing else qualifies: ordo.may_batch for the tenant and
-- its number (p_phone, from the caller's credential cache), and the
-- conversation is not halted and holds no reserved send slot. Anything else
-- goes through ordo.claim_conversation and the per-conversation drain.
--
-- Order: the tenant's due conversations are walked in due order, as
-- ordo.claim_conversation does, and the batch stops at the first one that
-- needs a full drain, so it never jumps ahead of an older one: when that is
-- the first, nothing is claimed here and ordo.claim_conversation, called
-- after this in the same transaction (jobs/session.go), claims it. When a
-- batch was claimed the transaction-local setting ordo.batch is 'y' and
-- ordo.claim_conversation claims nothing.
--
-- Locks: the conversations' session advisory locks (tried, never waited
-- for), then their rows FOR UPDATE SKIP LOCKED — never waited for either, so
-- the order among them does not matter, and a row another transaction holds
-- (an application's import) leaves its conversation out of the batch — then
-- steps, messages and ready rows of the locked conversations
-- (sql/LOCKING.md). more says another due conversation of the tenant was
-- left behind. p_max NULL: refill a running batch (ordo.finish_batch).
CREATE OR REPLACE FUNCTION ordo.claim_batch(p_lock int, p_tenant bigint, p_max int, p_lease_ms int, p_phone text)
RETURNS TABLE (
    conv bigint, fence bigint, conversation_id text, message_pk bigint, message_id text, seq bigint,
    payload jsonb, step_id bigint, credential_at timestamptz, more boolean)
LANGUAGE plpgsql
-- Walk the ready index in due order, and reach the batch's rows by their
-- keys, whatever the statistics say: without them (a new database, tables
-- that grew since the last ANALYZE) Postgres sorted every due row of the
-- tenant (as in ordo.claim_conversation) and scanned steps and
-- conversations whole for a batch of eight (`make bench` spread: 0.5 ms a
-- statement, growing with the tables).
SET enable_sort = off
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_cand  record;
    v_convs bigint[] := '{}';
    v_ok    bigint[];
    v_more  boolean := false;
BEGIN
    -- NULL: as many as the round ordo.finish_batch just recorded leaves.
    p_max := coalesce(p_max, nullif(current_setting('ordo.batch_left', true), '')::int, 0);
    PERFORM set_config('ordo.batch', '', true);
    IF p_max < 1 OR p_tenant IS NULL OR NOT ordo.may_batch(p_tenant, p_phone) THEN
        RETURN;
    END IF;
    FOR v_cand IN
        SELECT r.conversation_pk AS id,
               coalesce(c.halted_at IS NULL AND c.send_slot_at IS NULL
                        AND m.direction = 'outbound'
                        AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id), false) AS quiet
        FROM ordo.ready r
        JOIN ordo.conversations c ON c.id = r.conversation_pk
        LEFT JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
        WHERE r.tenant_id = p_tenant AND r.due_at <= now()
        ORDER BY r.due_at LIMIT p_max + 4
    LOOP
        IF cardinality(v_convs) >= p_max THEN
            v_more := true;
            EXIT;
        END IF;
        IF NOT pg_try_advisory_lock(p_lock, (v_cand.id % 2147483647)::int) THEN
            CONTINUE; -- another drain has it
        END IF;
        IF NOT v_cand.quiet THEN
            -- It needs a full drain, and it is next in line.
            PERFORM pg_advisory_unlock(p_lock, (v_cand.id % 2147483647)::int);
            v_more := true;
            EXIT;
        END IF;
        v_convs := v_convs || v_cand.id;
    END LOOP;
    IF cardinality(v_convs) = 0 THEN
        RETURN;
    END IF;
    -- Again under the row locks: a message may have come in, or the head
    -- moved, since the read above. Row locks are only tried (SKIP LOCKED).
    -- A conversation whose row changed is rechecked on its new version
    -- against the message row read here, which then no longer matches a
    -- moved head: it is left out (claimed by a later claim), never claimed
    -- wrongly; steps of a locked conversation's message come only from
    -- its lock holder.
    SELECT array_agg(l.id) INTO v_ok FROM (
        SELECT c.id FROM ordo.conversations c
        JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
        WHERE c.id = ANY (v_convs) AND c.halted_at IS NULL AND c.send_slot_at IS NULL AND m.direction = 'outbound'
          AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id)
        FOR UPDATE OF c SKIP LOCKED) l;
    PERFORM pg_advisory_unlock(p_lock, (x % 2147483647)::int)
    FROM unnest(v_convs) x WHERE x <> ALL (coalesce(v_ok, '{}'));
    IF v_ok IS NULL THEN
        RETURN;
    END IF;
    -- The batch's lease: one for all its conversations. ordo.batch_lease
    -- keeps it while the caller ends some of them one at a time (a failed
    -- send: ordo.park_conversation, ordo.finish_step and the drain's unlock
    -- end the lease only when it is empty); ordo.finish_batch's p_end, or
    -- the caller, clears it.
    PERFORM set_config('ordo.batch', 'y', true),
            set_config('ordo.batch_lease', p_lease_ms::text, false),
            set_config('idle_session_timeout', p_lease_ms::text, false);
    RETURN QUERY
    WITH q AS (
        SELECT c.id, c.conversation_id, m.id AS mpk, m.message_id, m.seq, m.payload
        FROM ordo.conversations c
        JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
        WHERE c.id = ANY (v_ok)),
    u AS (
        UPDATE ordo.conversations c SET fence = c.fence + 1 FROM q WHERE c.id = q.id
        RETURNING c.id, c.fence),
    st AS (
        INSERT INTO ordo.steps (message_pk, idx, kind, request, status, attempts, started_at)
        SELECT q.mpk, 0, 'send', q.payload, 'running', 1, now() FROM q
        RETURNING id, message_pk),
    ms AS (
        UPDATE ordo.messages m SET status = 'running' FROM q WHERE m.id = q.mpk AND m.status = 'queued'),
    rd AS (
        UPDATE ordo.ready r SET due_at = now() + make_interval(secs => p_lease_ms::float8 / 1000), running = true, woken = false
        FROM q WHERE r.conversation_pk = q.id)
    SELECT u.id, u.fence, q.conversation_id, q.mpk, q.message_id, q.seq, q.payload, st.id, cr.updated_at, v_more
    FROM q JOIN u ON u.id = q.id JOIN st ON st.message_pk = q.mpk
    LEFT JOIN ordo.credentials cr ON cr.tenant_id = p_tenant AND cr.name = 'whatsapp';
END;
$$;
