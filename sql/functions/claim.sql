-- ordo.claim is the one claim of a drain (sql/LIFECYCLE.md): it takes, for
-- the calling session, tenant p_tenant's conversations that have been due
-- the longest (ordo.ready), takes each over, and returns them with their
-- next message — a batch of 1..p_max whose next messages are sends started
-- here, or one conversation for a full drain. A worker's scheduler calls it
-- for the tenant whose turn it is (jobs/scheduler.go); everything the drain
-- needs comes back as its result.
--
-- The tenant's due conversations are walked in due order, those a user
-- waits on first (ordo.ready.urgent, set by ordo.enqueue_message: a user
-- who wrote in the middle of the tenant's campaign waited for every
-- conversation the campaign queued before); each is claimed
-- by its drain lock (ordo.drain_key), tried and never waited for, so one
-- another drain holds is passed over.
--   * A batch (p_max >= 1, number p_phone given, ordo.may_batch): while the
--     next conversation's next message is outbound with no step yet, and
--     the conversation is not halted, holds no reserved send slot and its
--     user's pair-rate wait (pair_ready_at, a 131056's) is over, it
--     joins the batch, up to p_max; the walk stops at the first that needs
--     a full drain, so the batch never jumps ahead of an older
--     conversation. The batch's rows are then taken FOR UPDATE SKIP LOCKED
--     (a row an application's import holds leaves its conversation out) and,
--     set-based, each is taken over — fence bumped, ready row running and
--     due again after the lease (a drain that dies is claimed again then)
--     — and its send step started (attempt 1, running): batched rows, one
--     per conversation, step_* its started send.
--   * Otherwise, with p_alone, the first due conversation another drain
--     does not hold is claimed alone: with p_cap > 0, one of the tenant's
--     p_cap concurrency slots first (advisory locks (-1 - slot, tenant),
--     tried; none free: nothing), then its row FOR UPDATE (the takeover)
--     if its ready row, read again under that row, is still due (the
--     walk's read may be stale by then; if not, the next candidate's row
--     is only tried, SKIP LOCKED: a claim never waits for a second row
--     with a first held), and its next message is read,
--     and its first step started when it may start now
--     (ordo.next_step): one row per step of that message (one
--     with NULL step_* when it has none, NULL message_* when there is no
--     next message), slot the slot it holds. A halted conversation found
--     there (a dead letter under halt) leaves the ready set here, and the
--     walk goes on.
-- p_release_slot of tenant p_release_tenant — the slot of the runner's
-- previous drain — is released first. more says another due conversation of
-- the tenant was left behind: the scheduler wakes one more runner.
-- p_lease_ms becomes the session's lease (ordo.drain_lease) when anything
-- is claimed. credential_at is the tenant's WhatsApp credential's stamp
-- (the drain's credential cache).
--
-- Locks (sql/LOCKING.md): advisory locks only tried; conversation rows
-- (FOR UPDATE: SKIP LOCKED for a batch, waited for alone, under the drain
-- lock), then steps, messages and ready rows of the rows it got.
CREATE OR REPLACE FUNCTION ordo.claim(
    p_tenant bigint, p_cap int, p_max int, p_alone boolean, p_lease_ms int, p_phone text,
    p_release_tenant bigint, p_release_slot int)
RETURNS TABLE (
    conv bigint, fence bigint, conversation_id text, head_seq bigint, last_seq bigint,
    slot int, more boolean, batched boolean, credential_at timestamptz,
    message_pk bigint, message_id text, seq bigint, direction text, payload jsonb,
    step_id bigint, step_idx int, step_kind text, step_status text, step_request jsonb, step_attempts int,
    since_start interval, provider_status text, provider_message_id text, started boolean,
    told text, told_wait interval)
LANGUAGE plpgsql
-- Walk ready_tenant_due_idx in due order and reach rows by their keys,
-- whatever the planner's statistics say: without them (a new database, a
-- ready set that grew from a few rows to a campaign's since the last
-- ANALYZE) Postgres sorted every due row of the tenant and scanned steps
-- and conversations whole (issue 11, `make bench` spread: 0.34 ms a claim
-- growing with the backlog; with this, 0.03 ms).
SET enable_sort = off
SET enable_seqscan = off
-- One plan per statement for the session, not one per call: with arrays and
-- a batch's size as parameters the plan cache kept choosing custom plans,
-- planning this function's statements again on every claim (half of a
-- claim of one; `make bench` spread claims thousands of times). Their
-- plans do not depend on the values: the settings above make them walk
-- indexes by key.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_cand  record;
    v_convs bigint[] := '{}';
    v_ok    bigint[];
    v_more  boolean := false;
    v_held  boolean := false; -- alone: a candidate's row taken (FOR UPDATE) already
    v_halted bigint[] := '{}'; -- alone: halted candidates, out of the ready set
    v_slot  int;
    v_start int;
    v_conv  bigint;
    v_c     record;
    v_cred  timestamptz;
    v_walk  bigint[];
BEGIN
    IF p_release_slot IS NOT NULL THEN
        PERFORM pg_advisory_unlock(-1 - p_release_slot, p_release_tenant::int);
    END IF;
    IF p_tenant IS NULL THEN
        RETURN;
    END IF;
    SELECT cr.updated_at INTO v_cred FROM ordo.credentials cr WHERE cr.tenant_id = p_tenant AND cr.name = 'whatsapp';
    -- The walk: the tenant's due conversations a user waits on (the
    -- partial index ready_urgent_idx: one probe, usually empty), then the
    -- others, each in due order. Append keeps its branches' order.
    v_walk := ARRAY(
        (SELECT r.conversation_pk FROM ordo.ready r
         WHERE r.tenant_id = p_tenant AND r.urgent AND r.due_at <= now()
         ORDER BY r.due_at LIMIT greatest(p_max + 4, 16))
        UNION ALL
        (SELECT r.conversation_pk FROM ordo.ready r
         WHERE r.tenant_id = p_tenant AND NOT r.urgent AND r.due_at <= now()
         ORDER BY r.due_at LIMIT greatest(p_max + 4, 16)));

    -- A batch: its candidates, by their drain locks (rows are locked below).
    IF p_max >= 1 AND coalesce(p_cap, 0) = 0 AND ordo.may_batch(p_tenant, p_phone) THEN
        -- Whether the next message has a step is probed per candidate
        -- (LATERAL … LIMIT 1: one index lookup each). As a NOT EXISTS in
        -- the select list the planner could hash every step of the
        -- database instead, on each claim: an index scan of steps whole,
        -- 66 ms a claim at 112,000 steps.
        FOR v_cand IN
            SELECT w.id,
                   coalesce(c.halted_at IS NULL AND c.send_slot_at IS NULL
                            AND (c.pair_ready_at IS NULL OR c.pair_ready_at <= now())
                            AND m.direction = 'outbound' AND st.message_pk IS NULL, false) AS quiet
            FROM unnest(v_walk) WITH ORDINALITY w(id, n)
            JOIN ordo.conversations c ON c.id = w.id
            LEFT JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
            LEFT JOIN LATERAL (SELECT s.message_pk FROM ordo.steps s WHERE s.message_pk = m.id LIMIT 1) st ON true
            ORDER BY w.n LIMIT p_max + 4
        LOOP
            IF cardinality(v_convs) >= p_max THEN
                v_more := true;
                EXIT;
            END IF;
            IF NOT (SELECT pg_try_advisory_lock(k.ns, k.key) FROM ordo.drain_key(v_cand.id) k) THEN
                CONTINUE; -- another drain has it
            END IF;
            IF NOT v_cand.quiet THEN
                -- It needs a full drain, and it is next in line.
                PERFORM ordo.drain_unlock(v_cand.id, NULL);
                v_more := true;
                EXIT;
            END IF;
            v_convs := v_convs || v_cand.id;
        END LOOP;
    END IF;

    IF cardinality(v_convs) = 0 THEN
        IF NOT p_alone THEN
            RETURN;
        END IF;
        -- One conversation, alone.
        v_more := false;
        IF p_cap > 0 THEN
            v_start := floor(random() * p_cap)::int;
            FOR k IN 0 .. p_cap - 1 LOOP
                IF pg_try_advisory_lock(-1 - (v_start + k) % p_cap, p_tenant::int) THEN
                    v_slot := (v_start + k) % p_cap;
                    EXIT;
                END IF;
            END LOOP;
            IF v_slot IS NULL THEN
                RETURN;
            END IF;
        END IF;
        FOR v_cand IN SELECT w.id FROM unnest(v_walk) WITH ORDINALITY w(id, n) ORDER BY w.n LIMIT 16 LOOP
            IF v_conv IS NOT NULL THEN
                -- The row after the claimed one: already fetched with it.
                v_more := true;
                EXIT;
            END IF;
            IF (SELECT pg_try_advisory_lock(k.ns, k.key) FROM ordo.drain_key(v_cand.id) k) THEN
                -- The takeover, under FOR UPDATE: it waits for a write of
                -- the drain before (its fence check holds the row), and a
                -- stale drain's later writes fail on the bumped fence.
                IF v_held THEN
                    -- A row taken already (below): never wait for a second
                    -- with it held — an import holding this one and then
                    -- asking for that one would deadlock with us.
                    PERFORM 1 FROM ordo.conversations c WHERE c.id = v_cand.id FOR UPDATE SKIP LOCKED;
                    IF NOT FOUND THEN
                        PERFORM ordo.drain_unlock(v_cand.id, NULL);
                        CONTINUE;
                    END IF;
                ELSE
                    PERFORM 1 FROM ordo.conversations c WHERE c.id = v_cand.id FOR UPDATE;
                    v_held := true;
                END IF;
                -- Still due? The walk's rows were read when it began; since
                -- then (this claim waited for an earlier row, or for the
                -- CPU) another drain may have taken this one, run it and
                -- parked it for later — a backoff, a Retry-After, Meta's
                -- pair-rate wait — or caught it up. Read again now, under
                -- the row every writer of the ready row takes first, on the
                -- clock (this transaction's start may be well past by now).
                -- Taken over, it waits for nothing any more: a mark that it
                -- waits for a dependency or its tenant's sending goes (its
                -- drain marks it again if that is still away), so a wake
                -- that skipped its row (ordo.wake_waiting) leaves none behind.
                UPDATE ordo.conversations c SET fence = c.fence + 1, handler_wait = false, number_wait = false, paused_wait = false
                WHERE c.id = v_cand.id
                  AND EXISTS (SELECT 1 FROM ordo.ready r WHERE r.conversation_pk = c.id AND r.due_at <= clock_timestamp())
                RETURNING c.id, c.fence, c.conversation_id, c.head_seq, c.last_seq, c.halted_at IS NOT NULL AS halted
                INTO v_c;
                IF NOT FOUND THEN
                    PERFORM ordo.drain_unlock(v_cand.id, NULL); -- deleted, or not due any more
                    CONTINUE;
                END IF;
                IF v_c.halted THEN
                    -- Halted on a dead letter: it waits for an operator out
                    -- of the ready set (below: ready rows come last in the
                    -- lock order), until a replay or skip puts it back
                    -- (ordo.resolve_dead_letter).
                    v_halted := v_halted || v_cand.id;
                    PERFORM ordo.drain_unlock(v_cand.id, NULL);
                    CONTINUE;
                END IF;
                v_conv := v_cand.id;
            END IF;
        END LOOP;
        IF v_conv IS NULL THEN
            IF v_slot IS NOT NULL THEN
                PERFORM pg_advisory_unlock(-1 - v_slot, p_tenant::int);
            END IF;
        ELSE
            -- Its next message, and that message's first step started when
            -- it may start now (steps, send slot, message: before the ready
            -- row, in the lock order).
            RETURN QUERY
            SELECT v_conv, v_c.fence, v_c.conversation_id, v_c.head_seq, v_c.last_seq, v_slot, v_more, false, v_cred,
                   n.message_pk, n.message_id, n.seq, n.direction, n.payload,
                   n.step_id, n.step_idx, n.step_kind, n.step_status, n.step_request, n.step_attempts,
                   n.since_start, n.provider_status, n.provider_message_id, n.started, n.told, n.told_wait
            FROM (SELECT 1) one
            LEFT JOIN LATERAL ordo.next_step(v_conv, v_c.fence, v_c.head_seq, p_tenant, p_phone) n ON true;
        END IF;
        DELETE FROM ordo.ready r WHERE r.conversation_pk = ANY (v_halted);
        IF v_conv IS NOT NULL THEN
            -- Running, and due again after the lease: a drain that dies is
            -- claimed again then.
            UPDATE ordo.ready r SET due_at = now() + make_interval(secs => p_lease_ms::float8 / 1000), running = true, woken = false
            WHERE r.conversation_pk = v_conv;
            PERFORM ordo.drain_lease(p_lease_ms);
        END IF;
        RETURN;
    END IF;

    -- The batch's rows, only tried (SKIP LOCKED), and checked again under
    -- them: a message may have come in, or the head moved, since the read
    -- above. A conversation whose row changed is rechecked on its new
    -- version against the message row read here, which then no longer
    -- matches a moved head: it is left out, never claimed wrongly.
    SELECT array_agg(l.id) INTO v_ok FROM (
        SELECT c.id FROM ordo.conversations c
        JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
        WHERE c.id = ANY (v_convs) AND c.halted_at IS NULL AND c.send_slot_at IS NULL AND m.direction = 'outbound'
          AND (c.pair_ready_at IS NULL OR c.pair_ready_at <= now())
          AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id)
        FOR UPDATE OF c SKIP LOCKED) l;
    PERFORM ordo.drain_unlock(x, NULL) FROM unnest(v_convs) x WHERE x <> ALL (coalesce(v_ok, '{}'));
    IF v_ok IS NULL THEN
        RETURN;
    END IF;
    -- Each taken over, its send started; one lease for the whole batch.
    RETURN QUERY
    WITH q AS (
        SELECT c.id, c.conversation_id, c.head_seq, c.last_seq, m.id AS mpk, m.message_id, m.seq, m.payload
        FROM ordo.conversations c
        JOIN ordo.messages m ON m.conversation_pk = c.id AND m.seq = c.head_seq + 1
        WHERE c.id = ANY (v_ok)),
    u AS (
        UPDATE ordo.conversations c SET fence = c.fence + 1, handler_wait = false, number_wait = false, paused_wait = false
        FROM q WHERE c.id = q.id
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
    SELECT u.id, u.fence, q.conversation_id, q.head_seq, q.last_seq, NULL::int, v_more, true, v_cred,
           q.mpk, q.message_id, q.seq, 'outbound'::text, q.payload,
           st.id, 0, 'send'::text, 'running'::text, q.payload, 1, interval '0', NULL::text, NULL::text, true, NULL::text, NULL::interval
    FROM q JOIN u ON u.id = q.id JOIN st ON st.message_pk = q.mpk;
    PERFORM ordo.drain_lease(p_lease_ms);
END;
$$;
