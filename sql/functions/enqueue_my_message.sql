-- ordo.enqueue_my_message is ordo.enqueue_message for a tenant's own
-- application role (`ordo tenant sql-role`): the tenant is the one the
-- session's login role belongs to (ordo.app_roles, by session_user), never
-- an argument, so an application can enqueue for its tenant and no other.
-- The same ingest path and guarantees, in the caller's own transaction (a
-- rollback stores nothing). It runs with the rights of ordo's role (SECURITY
-- DEFINER) on a fixed search_path; a role that is no tenant's gets SQLSTATE
-- 42501.
CREATE OR REPLACE FUNCTION ordo.enqueue_my_message(
    conversation_id text,
    message_id      text,
    direction       text,
    payload         jsonb
) RETURNS TABLE (id bigint, seq bigint, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_slug text;
BEGIN
    SELECT t.slug INTO v_slug
    FROM ordo.app_roles r JOIN ordo.tenants t ON t.id = r.tenant_id
    WHERE r.role_name = session_user;
    IF v_slug IS NULL THEN
        RAISE EXCEPTION 'role % is no tenant''s application role (ordo tenant sql-role)', session_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY
    SELECT e.id, e.seq, e.duplicate
    FROM ordo.enqueue_message(v_slug, enqueue_my_message.conversation_id, enqueue_my_message.message_id,
                              enqueue_my_message.direction, enqueue_my_message.payload) e;
END;
$$;
