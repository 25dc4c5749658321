-- A message's tenant is its conversation's (conversations.tenant_id, which
-- references the tenant with ON DELETE CASCADE, and messages.conversation_pk
-- cascades from the conversation), so the direct foreign key from messages
-- to tenants added nothing but a check per accepted message: a FOR KEY SHARE
-- lock on the tenant's row, which every concurrent ingest of the tenant
-- shares, so Postgres kept building a multixact on that one row (issue 11,
-- `make bench` spread).
ALTER TABLE ordo.messages DROP CONSTRAINT messages_tenant_id_fkey;
