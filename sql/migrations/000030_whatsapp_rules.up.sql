-- WhatsApp's own rules (issue 26).
--
-- The customer service window: when the end user last wrote, by the
-- WhatsApp timestamp of the latest inbound message ordo received through the
-- webhook (NULL: none seen, Meta decides). ordo.enqueue_message reads it
-- from the conversation row it locks anyway.
ALTER TABLE ordo.conversations ADD COLUMN last_inbound_at timestamptz;

-- Mark each inbound message read (with a typing indicator) before its
-- handler's replies are sent.
ALTER TABLE ordo.tenants ADD COLUMN mark_read boolean NOT NULL DEFAULT false;

-- An inbound message's read receipt: 'pending' when the webhook stored it
-- for a tenant with mark_read, 'sent' once the drain claimed it (before the
-- call, so it is never repeated), 'failed' when the call failed. NULL: none
-- to send.
ALTER TABLE ordo.messages ADD COLUMN read_receipt text
    CHECK (read_receipt IN ('pending', 'sent', 'failed'));

-- What Meta bills: the pricing of a sent message's statuses, once per wamid
-- (the first status that carries one). No foreign keys, like ordo.events:
-- a row waits for nobody (sql/LOCKING.md).
CREATE TABLE ordo.usage (
    tenant_id     bigint NOT NULL,
    wamid         text NOT NULL,
    category      text NOT NULL,
    billable      boolean NOT NULL,
    pricing_model text NOT NULL DEFAULT '',
    at            timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, wamid)
);
CREATE INDEX usage_tenant_at_idx ON ordo.usage (tenant_id, at);

-- Media ids seen in a tenant's inbound messages: GET /v1/media/{id} serves
-- only these, with the tenant's token.
CREATE TABLE ordo.media (
    tenant_id  bigint NOT NULL,
    media_id   text NOT NULL,
    mime_type  text NOT NULL DEFAULT '',
    message_id text NOT NULL,
    seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, media_id)
);
