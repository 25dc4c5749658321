-- ordo's tables and indexes, current definitions in one place. The schema
-- and River's tables are created before this (sql.Up: schema, then River's
-- own migrator, then these migrations); the functions come after, from
-- sql/functions/. This baseline squashes the migrations ordo carried before
-- its first release (1 and 10 to 15); sql.Up records it as applied on a
-- database that has them (sql/baseline.go). Columns added by later ALTERs
-- keep their place at the end of their table, so both are the same table.

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
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- Sends per second per phone number (Meta's default throughput is 80);
    -- 0 leaves the number unpaced.
    send_rate             int NOT NULL DEFAULT 80 CHECK (send_rate BETWEEN 0 AND 100000),
    -- Minimum gap between two sends to one user (pair rate), in ms; 0 is off.
    pair_gap_ms           int NOT NULL DEFAULT 0 CHECK (pair_gap_ms BETWEEN 0 AND 86400000),
    -- Set when Meta refused the tenant's credential or account: its sends
    -- wait until an operator resumes them (ordo.resume_sending).
    sending_paused_at     timestamptz,
    sending_paused_reason text
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
--
-- The row's frequent updates are HOT (no new index entries): seq (ingest),
-- head (every finished message) and fence (takeover) change many times per
-- message, so no index names those columns, and free space on each page
-- (fillfactor) keeps the updated row version on its page. The reconciler
-- looks for orphans (work but no drain: only a bug or an operator's hand
-- makes one) with a scan, every OrphanInterval (jobs.Config).
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
    -- A send slot reserved on the phone number's pacing and not used yet: the
    -- drain snoozed until it and uses it when it comes back.
    send_slot_at    timestamptz,
    -- The earliest time the next send to this user may start: the last
    -- send's answer plus the tenant's pair gap (written by the drain).
    pair_ready_at   timestamptz,
    UNIQUE (tenant_id, conversation_id),
    CHECK (head_seq <= last_seq)
) WITH (fillfactor = 70);
-- For the reconciler: conversations that expect a drain.
CREATE INDEX conversations_drain_idx ON ordo.conversations (drain_job_id) WHERE drain_job_id IS NOT NULL;

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
    -- whatsapp.StatusRank of provider_status: status webhooks never regress it.
    provider_status_rank int NOT NULL DEFAULT 0,
    -- Consecutive 131056 (pair rate) errors of the step: its next retry is
    -- 4^(n-1) seconds out.
    pair_rate_errors     int NOT NULL DEFAULT 0,
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

-- One row per business phone number: the next free send slot, handed out
-- one send interval (1 / send_rate) apart by ordo.reserve_send, and how long
-- Meta told the number to back off (throttled_until). Slots reserved before
-- a throttle and falling inside it are given up and reserved again.
CREATE TABLE ordo.send_pacing (
    phone_number_id text PRIMARY KEY,
    next_slot       timestamptz NOT NULL,
    throttled_until timestamptz
);
