-- Tenant events (issue 16 point 5): the outbox. A fact (a send done, a
-- status from Meta, a dead letter, a halt, a pause or resume) writes its
-- event here in the fact's own transaction (the triggers in
-- sql/functions/event_on_*.sql), only for a tenant with an events_url; River
-- jobs (jobs/events.go) POST each stream's events in id order and delete
-- them once the tenant's endpoint answered 2xx.
--
-- No foreign keys: a foreign-key check takes KEY SHARE on the row it
-- references, and the triggers run after the step or dead-letter writes
-- that come below the conversation in the lock order (sql/LOCKING.md); a
-- takeover's or replay's FOR UPDATE on the conversation would deadlock
-- with it. A deleted tenant's or conversation's events are still the
-- tenant's facts: they go out, or are dropped when the tenant is gone.
CREATE TABLE ordo.events (
    -- The event's stable id: the same in every delivery attempt.
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       bigint NOT NULL,
    -- The stream the event is ordered in: its conversation, or NULL for the
    -- tenant's own events (tenant.sending_paused|resumed).
    conversation_pk bigint,
    type            text NOT NULL,
    -- The event's fields, fixed when it happened (conversation_id,
    -- message_id, …).
    data            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Delivery: attempts so far, when the next may start, the last error.
    attempts        int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text
);
-- A stream's events in order (stream 0: the tenant's own); its head (lowest
-- id) is the one delivered next. The dispatcher walks it one probe per
-- stream (jobs/events.go), however many events wait.
CREATE INDEX events_stream_idx ON ordo.events (tenant_id, (coalesce(conversation_pk, 0)), id);
