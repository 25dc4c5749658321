-- ordo's own tables. River's live beside them in the same schema.

CREATE TABLE ordo.tenants (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slug           text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9-]{1,63}$'),
    name           text NOT NULL DEFAULT '',
    -- Where inbound messages are POSTed for replies; NULL keeps them unanswered.
    handler_url    text,
    -- What a conversation does when one of its messages is dead-lettered.
    on_dead_letter text NOT NULL DEFAULT 'halt' CHECK (on_dead_letter IN ('halt', 'skip')),
    -- What a send whose outcome is unknown (timeout after the request left) does.
    ambiguous      text NOT NULL DEFAULT 'reconcile' CHECK (ambiguous IN ('reconcile', 'resend')),
    -- Attempts a step gets before its message is dead-lettered.
    max_attempts   int NOT NULL DEFAULT 8 CHECK (max_attempts BETWEEN 1 AND 100),
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- API keys are shown once and stored only as a SHA-256 of the whole key; the
-- prefix identifies a key in listings and revocation.
CREATE TABLE ordo.api_keys (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    prefix     text NOT NULL UNIQUE,
    hash       bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_keys_tenant_idx ON ordo.api_keys (tenant_id);

-- Envelope encryption: ciphertext is the credential sealed with a per-row data
-- key; wrapped_key is that data key sealed with master key key_id. Both seals
-- bind (tenant_id, name) as associated data.
CREATE TABLE ordo.credentials (
    tenant_id   bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    name        text NOT NULL CHECK (name ~ '^[a-z0-9_-]{1,63}$'),
    key_id      text NOT NULL,
    wrapped_key bytea NOT NULL,
    ciphertext  bytea NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);
CREATE INDEX credentials_key_id_idx ON ordo.credentials (key_id);

-- A conversation is an ordered stream of messages. last_seq is the newest
-- accepted message, head_seq the newest finished one. fence is bumped by every
-- drain that takes the conversation over; drain writes carry it. drain_job_id
-- is the River job that will drain the conversation, NULL when none is needed.
CREATE TABLE ordo.conversations (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    conversation_id text NOT NULL,
    last_seq        bigint NOT NULL DEFAULT 0,
    head_seq        bigint NOT NULL DEFAULT 0,
    fence           bigint NOT NULL DEFAULT 0,
    drain_job_id    bigint,
    halted_at       timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, conversation_id),
    CHECK (head_seq <= last_seq)
);
-- For the reconciler: conversations that expect a drain, and ones that need one.
CREATE INDEX conversations_drain_idx ON ordo.conversations (drain_job_id) WHERE drain_job_id IS NOT NULL;
CREATE INDEX conversations_orphan_idx ON ordo.conversations (id)
    WHERE drain_job_id IS NULL AND head_seq < last_seq AND halted_at IS NULL;

CREATE TABLE ordo.messages (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    conversation_pk bigint NOT NULL REFERENCES ordo.conversations (id) ON DELETE CASCADE,
    message_id      text NOT NULL,
    seq             bigint NOT NULL,
    direction       text NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'done', 'dead', 'skipped')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    -- Accepted once, for ever: this constraint is the dedupe.
    UNIQUE (tenant_id, message_id),
    UNIQUE (conversation_pk, seq)
);

-- A step is a checkpointed unit of a message's work, run in idx order.
CREATE TABLE ordo.steps (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_pk          bigint NOT NULL REFERENCES ordo.messages (id) ON DELETE CASCADE,
    idx                 int NOT NULL,
    kind                text NOT NULL CHECK (kind IN ('handle', 'send')),
    -- running: an attempt started and its outcome is not recorded yet.
    -- unknown: the attempt's outcome is ambiguous (the request may have gone out).
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'running', 'unknown', 'done', 'failed')),
    request             jsonb,
    attempts            int NOT NULL DEFAULT 0,
    -- Every attempt's error, oldest first: [{"attempt","at","error"}].
    errors              jsonb NOT NULL DEFAULT '[]',
    provider_message_id text,
    provider_status     text,
    ambiguous_count     int NOT NULL DEFAULT 0,
    started_at          timestamptz,
    finished_at         timestamptz,
    UNIQUE (message_pk, idx)
);
CREATE INDEX steps_provider_message_idx ON ordo.steps (provider_message_id) WHERE provider_message_id IS NOT NULL;

CREATE TABLE ordo.dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    message_pk  bigint NOT NULL REFERENCES ordo.messages (id) ON DELETE CASCADE,
    step_id     bigint REFERENCES ordo.steps (id) ON DELETE CASCADE,
    reason      text NOT NULL,
    errors      jsonb NOT NULL DEFAULT '[]',
    created_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolution  text CHECK (resolution IN ('replayed', 'skipped'))
);
CREATE INDEX dead_letters_tenant_idx ON ordo.dead_letters (tenant_id, id);
CREATE INDEX dead_letters_message_idx ON ordo.dead_letters (message_pk);

-- What the built-in sandbox channel (ordo dev) was asked to send.
CREATE TABLE ordo.sandbox_sends (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    phone_number_id text NOT NULL,
    wamid           text NOT NULL,
    body            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- ordo.ensure_drain is the one place a conversation's drain job is scheduled.
-- It schedules one unless the conversation is halted, has nothing to do, or
-- already expects a drain (drain_job_id set and not the job being replaced).
-- Replacing a dead job on a conversation with nothing to do clears it.
-- Returns the new job's id, or NULL.
CREATE FUNCTION ordo.ensure_drain(conv bigint, replacing bigint DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_c   record;
    v_job bigint;
BEGIN
    SELECT c.drain_job_id, c.halted_at, c.head_seq, c.last_seq INTO v_c
    FROM ordo.conversations c WHERE c.id = conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_c.drain_job_id IS NOT NULL AND v_c.drain_job_id IS DISTINCT FROM replacing THEN
        RETURN NULL;
    END IF;
    IF v_c.halted_at IS NOT NULL OR v_c.head_seq >= v_c.last_seq THEN
        IF v_c.drain_job_id IS NOT NULL THEN
            UPDATE ordo.conversations c SET drain_job_id = NULL WHERE c.id = conv;
        END IF;
        RETURN NULL;
    END IF;
    INSERT INTO ordo.river_job (args, kind, max_attempts, priority, queue, state, scheduled_at)
    VALUES (jsonb_build_object('conversation', conv), 'ordo_drain', 25, 1, 'ordo', 'available', now())
    RETURNING ordo.river_job.id INTO v_job;
    UPDATE ordo.conversations c SET drain_job_id = v_job WHERE c.id = conv;
    -- River's producers LISTEN on <schema>.river_insert; delivered at commit.
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
    RETURN v_job;
END;
$$;

-- ordo.check_fence starts every write batch of a drain. It holds a KEY SHARE
-- lock on the conversation to commit, so a takeover (which bumps the fence
-- under FOR UPDATE) waits for the write, and raises ORF01 when the token is
-- stale so the whole batch rolls back.
CREATE FUNCTION ordo.check_fence(conv bigint, token bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ordo.conversations c WHERE c.id = conv AND c.fence = token FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', token, conv USING ERRCODE = 'ORF01';
    END IF;
END;
$$;

-- ordo.enqueue_message is the one ingest path (REST, webhooks and other
-- applications' SQL all call it). In the caller's transaction it dedupes on
-- (tenant, message_id), takes the conversation's next seq and makes sure the
-- conversation has a drain job; a repeat returns the original with
-- duplicate = true. It raises SQLSTATE 22023 with "field: problem" on bad
-- input and P0002 for an unknown tenant.
CREATE FUNCTION ordo.enqueue_message(
    tenant_slug     text,
    conversation_id text,
    message_id      text,
    direction       text,
    payload         jsonb
) RETURNS TABLE (id bigint, seq bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant bigint;
    v_conv   bigint;
    v_seq    bigint;
    v_id     bigint;
    v_drain  bigint;
    v_halted timestamptz;
    v_dir    text := coalesce(enqueue_message.direction, 'outbound');
BEGIN
    IF enqueue_message.conversation_id IS NULL OR enqueue_message.conversation_id = '' THEN
        RAISE EXCEPTION 'conversation_id: required' USING ERRCODE = '22023';
    ELSIF length(enqueue_message.conversation_id) > 256 OR enqueue_message.conversation_id ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'conversation_id: must be 1 to 256 printable characters' USING ERRCODE = '22023';
    ELSIF enqueue_message.message_id IS NULL OR enqueue_message.message_id = '' THEN
        RAISE EXCEPTION 'message_id: required' USING ERRCODE = '22023';
    ELSIF length(enqueue_message.message_id) > 256 OR enqueue_message.message_id ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'message_id: must be 1 to 256 printable characters' USING ERRCODE = '22023';
    ELSIF v_dir NOT IN ('inbound', 'outbound') THEN
        RAISE EXCEPTION 'direction: must be inbound or outbound' USING ERRCODE = '22023';
    ELSIF enqueue_message.payload IS NULL OR jsonb_typeof(enqueue_message.payload) <> 'object' THEN
        RAISE EXCEPTION 'payload: must be a JSON object' USING ERRCODE = '22023';
    ELSIF pg_column_size(enqueue_message.payload) > 262144 THEN
        RAISE EXCEPTION 'payload: larger than 256 KiB' USING ERRCODE = '22023';
    END IF;

    SELECT t.id INTO v_tenant FROM ordo.tenants t WHERE t.slug = tenant_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'tenant: not found' USING ERRCODE = 'P0002';
    END IF;

    -- A repeat of a committed message costs one index lookup and no lock.
    SELECT m.id, m.seq INTO v_id, v_seq
    FROM ordo.messages m WHERE m.tenant_id = v_tenant AND m.message_id = enqueue_message.message_id;
    IF FOUND THEN
        RETURN QUERY SELECT v_id, v_seq, true;
        RETURN;
    END IF;

    -- Take the next seq. The row lock this takes is held to commit, so seqs are
    -- handed out in commit order and the drain's end check sees every message.
    INSERT INTO ordo.conversations AS c (tenant_id, conversation_id, last_seq)
    VALUES (v_tenant, enqueue_message.conversation_id, 1)
    ON CONFLICT ON CONSTRAINT conversations_tenant_id_conversation_id_key
        DO UPDATE SET last_seq = c.last_seq + 1
    RETURNING c.id, c.last_seq, c.drain_job_id, c.halted_at INTO v_conv, v_seq, v_drain, v_halted;

    INSERT INTO ordo.messages AS m (tenant_id, conversation_pk, message_id, seq, direction, payload)
    VALUES (v_tenant, v_conv, enqueue_message.message_id, v_seq, v_dir, enqueue_message.payload)
    ON CONFLICT ON CONSTRAINT messages_tenant_id_message_id_key DO NOTHING
    RETURNING m.id INTO v_id;

    IF v_id IS NULL THEN
        -- A concurrent copy committed first. Give the seq back (this
        -- transaction still holds the row lock, so nobody took a later one)
        -- and answer with the original.
        UPDATE ordo.conversations c SET last_seq = c.last_seq - 1 WHERE c.id = v_conv;
        SELECT m.id, m.seq INTO v_id, v_seq
        FROM ordo.messages m WHERE m.tenant_id = v_tenant AND m.message_id = enqueue_message.message_id;
        RETURN QUERY SELECT v_id, v_seq, true;
        RETURN;
    END IF;

    IF v_drain IS NULL AND v_halted IS NULL THEN
        PERFORM ordo.ensure_drain(v_conv);
    END IF;

    RETURN QUERY SELECT v_id, v_seq, false;
END;
$$;
