-- Bounded storage (issue 14). A tenant's retention is how long a finished
-- message keeps its content; 0 keeps it for ever. After it, ordo.prune_messages
-- sets the message's payload to NULL and deletes its steps and resolved dead
-- letters: the row that is left (tenant, message_id, conversation, seq,
-- status) is the dedupe record, kept for ever.
ALTER TABLE ordo.tenants ADD COLUMN retention interval NOT NULL DEFAULT '30 days'
    CHECK (retention >= interval '0');

-- NULL payload: the message was pruned (its content removed).
ALTER TABLE ordo.messages ALTER COLUMN payload DROP NOT NULL;

-- The pruner walks a tenant's messages that still have content, oldest
-- first. Without this it would scan every dedupe record (EXPLAIN: a seq scan
-- of ordo.messages). Its predicate names payload, which no drain write
-- changes, so a message's status updates stay HOT; pruned rows leave it.
CREATE INDEX messages_unpruned_idx ON ordo.messages (tenant_id, id) WHERE payload IS NOT NULL;
