-- Every operator action (admin page, command line, a tenant's own replay or
-- skip through the API), written in the transaction of the action itself:
-- an action that rolled back leaves no entry, one that committed always has
-- one. The subject is kept as text (tenant slug, conversation and message
-- ids) so the entry outlives what it names; details never hold a secret.
CREATE TABLE ordo.audit_log (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    -- "admin:<basic-auth user name>", "cli" or "api:<key prefix>".
    actor           text NOT NULL,
    -- What was done: tenant.create, dead_letter.replay, …
    action          text NOT NULL,
    tenant          text,
    conversation_id text,
    message_id      text,
    dead_letter_id  bigint,
    details         jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant_idx ON ordo.audit_log (tenant, id);

-- When the provider's latest status (sent, delivered, read, failed) was
-- recorded, for the admin page's timeline.
ALTER TABLE ordo.steps ADD COLUMN provider_status_at timestamptz;

-- The open dead letters per tenant, read by the admin page's tiles and
-- filters without scanning the resolved ones.
CREATE INDEX dead_letters_open_idx ON ordo.dead_letters (tenant_id, id) WHERE resolved_at IS NULL;
