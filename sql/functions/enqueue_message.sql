-- ordo.enqueue_message is the one ingest path (REST, webhooks and other
-- applications' SQL all call it). In the caller's transaction it dedupes on
-- (tenant, message_id), takes the conversation's next seq and makes sure the
-- conversation is in the ready set (its drain will come); a repeat returns the original with
-- duplicate = true. It raises SQLSTATE 22023 with "field: problem" on bad
-- input (ids by ordo.id_problem, the rule REST and the webhook check first
-- in Go) and P0002 for an unknown tenant.
--
-- A repeat is answered only as durably as an insert: its transaction writes
-- a WAL record (a logical message, prefix 'ordo.repeat', seen only by
-- logical decoding), so its commit waits for the synchronous standby, which
-- then holds the original too (a failover cannot take the answer back).
--
-- A repeat is only a repeat of the same body: the message's body hash
-- (ordo.message_body_hash of conversation, direction and payload, stored
-- with the message and kept by the pruner) must match. A message_id reused
-- with another body raises SQLSTATE ORM01 (sql.SQLStateMessageIDReused;
-- the REST API's 422 message_id_reused), which rolls back the caller's
-- transaction: nothing of it is stored. on_reuse => 'duplicate' answers it
-- as a duplicate instead (Meta's webhook deliveries, which nobody could be
-- told about a conflict and whose redeliveries must never be refused). A
-- message whose hash was never recorded (accepted before the column) is
-- compared with its payload while it has one, and is a duplicate after.
--
-- A conversation that is not halted and has no row in the ready set gets one
-- (due now) after the message, under the conversation row's lock, so the
-- drain that catches the conversation up (which deletes the row under the
-- same lock) either sees this message or leaves the row to this call
-- (ordo.ready, migrations/000005_ready.up.sql). The row is urgent (a user
-- waits on the conversation: its claims and paced sends go first, 000052)
-- when the message is inbound, or an outbound one right after an inbound
-- one accepted within the last 5 minutes (an answer the workflow posts
-- itself). After taking the row lock it looks for the message
-- again before inserting it: a copy that committed while this call waited is
-- answered as a duplicate without touching the unique index (see the
-- comment in the body; regression test sql/enqueue_race_test.go).
--
-- The customer service window: an outbound message that is not a template,
-- to a conversation whose latest inbound message seen through the webhook
-- (conversations.last_inbound_at, read from the row this call locks) is
-- stamped more than 24 hours ago, raises SQLSTATE ORW01
-- (sql.SQLStateOutsideServiceWindow; the REST API's 422
-- outside_service_window) naming when the window closed; nothing is stored.
-- No inbound message seen: accepted (Meta decides). A repeat of an accepted
-- message is answered as before, whatever the window.
--
-- WhatsApp's message schema (jobs/whatsapp/validate.go) is Go's: ordo's own
-- ingest (engine.Ingest: REST) checks an outbound message before this call
-- and passes checked => true. Any other caller's outbound message (another
-- application's SQL, ordo.enqueue_my_message) is stored with its send step
-- already there, status 'unchecked': its drain checks it once before the
-- first attempt, and never sends one that fails (jobs/check.go). An
-- application passing checked => true skips that check, and a message
-- WhatsApp refuses then dead-letters with Meta's error instead of ordo's.
CREATE OR REPLACE FUNCTION ordo.enqueue_message(
    tenant_slug     text,
    conversation_id text,
    message_id      text,
    direction       text,
    payload         jsonb,
    on_reuse        text DEFAULT 'error',
    checked         boolean DEFAULT false
) RETURNS TABLE (id bigint, seq bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant  bigint;
    v_conv    bigint;
    v_seq     bigint;
    v_id      bigint;
    v_halted  boolean;
    v_dup_id  bigint;
    v_dup_seq bigint;
    v_dir     text := coalesce(enqueue_message.direction, 'outbound');
    v_hash    bytea;
    v_old     bytea;
    v_inbound timestamptz;
    v_problem text;
BEGIN
    v_problem := coalesce('message_id: ' || ordo.id_problem(enqueue_message.message_id),
                          'conversation_id: ' || ordo.id_problem(enqueue_message.conversation_id));
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION '%', v_problem USING ERRCODE = '22023';
    ELSIF v_dir NOT IN ('inbound', 'outbound') THEN
        RAISE EXCEPTION 'direction: must be inbound or outbound' USING ERRCODE = '22023';
    ELSIF enqueue_message.payload IS NULL OR jsonb_typeof(enqueue_message.payload) <> 'object' THEN
        RAISE EXCEPTION 'payload: must be a JSON object' USING ERRCODE = '22023';
    ELSIF pg_column_size(enqueue_message.payload) > 262144 THEN
        RAISE EXCEPTION 'payload: larger than 256 KiB' USING ERRCODE = '22023';
    ELSIF on_reuse IS NULL OR on_reuse NOT IN ('error', 'duplicate') THEN
        RAISE EXCEPTION 'on_reuse: must be error or duplicate' USING ERRCODE = '22023';
    END IF;
    v_hash := ordo.message_body_hash(enqueue_message.conversation_id, v_dir, enqueue_message.payload);

    SELECT t.id INTO v_tenant FROM ordo.tenants t WHERE t.slug = tenant_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenant: not found' USING ERRCODE = 'P0002';
    END IF;

    -- A repeat of a committed message costs one index lookup and no lock,
    -- and one WAL record: the original it answers with may be committed on
    -- this node only (its own commit gave up waiting for the synchronous
    -- standby when the postmaster died or its backend was cancelled, and
    -- was visible from then on), and a read-only transaction's commit
    -- waits for no standby: its answer would be a 2xx that a failover
    -- takes back. A transactional logical message (no table, no lock; any
    -- wal_level) gives this transaction an id and a WAL record, so its
    -- commit waits for the standby like an insert's; a standby that
    -- confirms it has every earlier commit, the original's included.
    -- Postgres does not wait for a transaction that has an id but wrote no
    -- WAL (pg_current_xact_id() alone would not do).
    SELECT m.id, m.seq, m.body_hash INTO v_id, v_seq, v_old
    FROM ordo.messages m WHERE m.tenant_id = v_tenant AND m.message_id = enqueue_message.message_id;
    IF FOUND THEN
        PERFORM ordo.check_reuse(v_id, v_old, v_hash, on_reuse);
        PERFORM pg_logical_emit_message(true, 'ordo.repeat', '');
        RETURN QUERY SELECT v_id, v_seq, true;
        RETURN;
    END IF;

    -- Take the next seq. The row lock this takes is held to commit, so seqs
    -- are handed out in commit order and the drain's end check sees every
    -- message.
    INSERT INTO ordo.conversations AS c (tenant_id, conversation_id, last_seq)
    VALUES (v_tenant, enqueue_message.conversation_id, 1)
    ON CONFLICT ON CONSTRAINT conversations_tenant_id_conversation_id_key DO UPDATE SET
        last_seq = c.last_seq + 1
    RETURNING c.id, c.last_seq, c.halted_at IS NOT NULL, c.last_inbound_at INTO v_conv, v_seq, v_halted, v_inbound;

    -- A copy that committed while this call waited for the conversation's
    -- row lock is visible now (each statement sees what committed before it
    -- started): answer with it rather than insert. Inserting would make the
    -- unique check wait for a drain that may already be finishing that copy
    -- (its message row updated, not committed), and that drain waits for
    -- this row lock to move the conversation's head: a deadlock, which
    -- Postgres breaks after deadlock_timeout by failing one side (found by
    -- `ordo chaos`).
    SELECT m.id, m.seq, m.body_hash INTO v_dup_id, v_dup_seq, v_old
    FROM ordo.messages m WHERE m.tenant_id = v_tenant AND m.message_id = enqueue_message.message_id;
    IF FOUND THEN
        PERFORM ordo.check_reuse(v_dup_id, v_old, v_hash, on_reuse);
        UPDATE ordo.conversations c SET last_seq = c.last_seq - 1 WHERE c.id = v_conv;
        RETURN QUERY SELECT v_dup_id, v_dup_seq, true;
        RETURN;
    END IF;

    IF v_dir = 'outbound' AND v_inbound IS NOT NULL AND v_inbound + interval '24 hours' < now()
       AND coalesce(enqueue_message.payload->>'type', '') <> 'template' THEN
        RAISE EXCEPTION 'outside the 24-hour customer service window: it closed at % (24 hours after the user''s last message); until the user writes again only a template can be sent',
            to_char((v_inbound + interval '24 hours') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'ORW01';
    END IF;

    INSERT INTO ordo.messages AS m (tenant_id, conversation_pk, message_id, seq, direction, payload, body_hash)
    VALUES (v_tenant, v_conv, enqueue_message.message_id, v_seq, v_dir, enqueue_message.payload, v_hash)
    ON CONFLICT ON CONSTRAINT messages_tenant_id_message_id_key DO NOTHING
    RETURNING m.id INTO v_id;

    IF v_id IS NULL THEN
        -- A concurrent copy (in another conversation, or committed after
        -- the look above) committed first. Give the seq back: this
        -- transaction still holds the row lock, so nobody took a later one.
        -- Answer with the original.
        SELECT m.id, m.seq, m.body_hash INTO v_id, v_seq, v_old
        FROM ordo.messages m WHERE m.tenant_id = v_tenant AND m.message_id = enqueue_message.message_id;
        PERFORM ordo.check_reuse(v_id, v_old, v_hash, on_reuse);
        UPDATE ordo.conversations c SET last_seq = c.last_seq - 1 WHERE c.id = v_conv;
        RETURN QUERY SELECT v_id, v_seq, true;
        RETURN;
    END IF;

    IF v_dir = 'outbound' AND NOT coalesce(enqueue_message.checked, false) THEN
        -- Its send step, to be checked by the drain (a new row of the new
        -- message: no lock anyone else could hold).
        INSERT INTO ordo.steps (message_pk, idx, kind, request, status)
        VALUES (v_id, 0, 'send', enqueue_message.payload, 'unchecked');
    END IF;

    IF NOT v_halted THEN
        PERFORM ordo.make_ready(v_conv, v_tenant, v_dir = 'inbound' OR EXISTS (
            SELECT 1 FROM ordo.messages pm
            WHERE pm.conversation_pk = v_conv AND pm.seq = v_seq - 1
              AND pm.direction = 'inbound' AND pm.created_at > now() - interval '5 minutes'));
    END IF;

    RETURN QUERY SELECT v_id, v_seq, false;
END;
$$;
