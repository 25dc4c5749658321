-- Applications' own database roles (`ordo tenant sql-role`): a login role per
-- tenant's applications that can only enqueue for that tenant
-- (ordo.enqueue_my_message, which finds the tenant here by session_user) and
-- read that tenant's messages (ordo.my_messages). The role owning ordo's
-- schema reads every tenant's sealed credentials and writes every table; an
-- application should not connect as it.
CREATE TABLE ordo.app_roles (
    role_name  text PRIMARY KEY,
    tenant_id  bigint NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX app_roles_tenant_idx ON ordo.app_roles (tenant_id);

-- A tenant application's view of its messages: the rows of the tenant its
-- role belongs to, never another's (security_barrier: no function of the
-- caller's sees a row the filter drops).
CREATE VIEW ordo.my_messages WITH (security_barrier) AS
SELECT m.message_id, c.conversation_id, m.seq, m.direction, m.status, m.created_at, m.finished_at
FROM ordo.messages m
JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE m.tenant_id = (SELECT r.tenant_id FROM ordo.app_roles r WHERE r.role_name = session_user);

-- Postgres lets every role execute a new function; ordo's are for ordo's
-- own role (and the one granted to applications): none for PUBLIC, today's
-- or tomorrow's.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ordo FROM PUBLIC;
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
