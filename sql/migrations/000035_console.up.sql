-- The operations console (issue 28): named operators with roles, their
-- login sessions, the index a message-id prefix search runs on, and the
-- per-minute counters the overview's live numbers are read from.

-- An operator of the admin console. The password is an argon2id hash in
-- PHC form ($argon2id$v=19$m=…,t=…,p=…$salt$hash); "admin" is reserved for
-- the break-glass account of ORDO_ADMIN_PASSWORD.
CREATE TABLE ordo.operators (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' AND name <> 'admin'),
    role          text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- A console login. Only the SHA-256 of the cookie's token is stored: a
-- read of this table does not log anyone in. operator_id NULL is the
-- break-glass admin; removing an operator ends their sessions.
CREATE TABLE ordo.operator_sessions (
    token_hash   bytea PRIMARY KEY,
    operator_id  bigint REFERENCES ordo.operators (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX operator_sessions_expires_idx ON ordo.operator_sessions (expires_at);

-- The console's search by message-id prefix across tenants: a range scan
-- in byte order (message_id >= p AND message_id < p's successor).
CREATE INDEX messages_message_id_prefix_idx ON ordo.messages (message_id COLLATE "C", id);

-- The halted conversations, for the overview's attention list and backlog
-- without a scan of every conversation. Halting and its end are rare, so
-- the row's frequent updates (seq, head, fence) stay HOT.
CREATE INDEX conversations_halted_idx ON ordo.conversations (id) WHERE halted_at IS NOT NULL;

-- The overview's live numbers, counted when they happen (ordo.stats_on_message,
-- ordo.stats_on_step) instead of read back from messages and steps: a refresh
-- sums at most a window's minutes per tenant, whatever the database's size.
-- shard (0..15) spreads concurrent writers (backend pid) over rows so that
-- two transactions of one tenant rarely wait for each other's counter; a
-- minute that is over is merged into shard -1 (engine.compactStats), so a
-- window's read is about one row per tenant and minute.
-- latency is a histogram of accept→first-send times: bucket i (1-based)
-- holds times in [1.25^(i-2), 1.25^(i-1)) ms, bucket 1 those under 1 ms.
CREATE TABLE ordo.stats_minutes (
    minute    timestamptz NOT NULL,
    tenant_id bigint NOT NULL,
    shard     int NOT NULL,
    accepted  bigint NOT NULL DEFAULT 0,
    sent      bigint NOT NULL DEFAULT 0,
    latency   int[] NOT NULL DEFAULT array_fill(0, ARRAY[80]),
    PRIMARY KEY (minute, tenant_id, shard)
);
-- The rows still to merge (engine.compactStats), without a scan of the
-- merged ones.
CREATE INDEX stats_minutes_open_idx ON ordo.stats_minutes (minute) WHERE shard >= 0;
