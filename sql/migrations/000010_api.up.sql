-- The API side of issue 16: a reused message_id with another body is told
-- apart from a repeat, and tenants get leases with fencing tokens.

-- SHA-256 of the message's canonical accepted body (ordo.message_body_hash:
-- conversation, direction and payload as jsonb text). It is part of the
-- dedupe record: the pruner and purge leave it, so a repeat months after the
-- content was removed is still compared. NULL for messages accepted before
-- this column (a repeat compares with the hash of their payload while they
-- still have one, and is a duplicate once pruned).
ALTER TABLE ordo.messages ADD COLUMN body_hash bytea;

-- A lease per (tenant, key): the holder's token and until when it holds.
-- A row is never deleted while its tenant lives (release and expiry leave
-- it, with expires_at in the past), so the next token is always greater
-- than every one handed out before for that key.
CREATE TABLE ordo.leases (
    tenant_id  bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    key        text   NOT NULL CHECK (length(key) BETWEEN 1 AND 256),
    token      bigint NOT NULL CHECK (token > 0),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
