-- ordo.create_app_role creates a login role for tenant_slug's applications
-- (`ordo tenant sql-role`) that may do two things: call
-- ordo.enqueue_my_message (for that tenant only) and read ordo.my_messages
-- (that tenant's messages). Nothing else of the schema: no table, no other
-- function (none is executable by PUBLIC; it says so again here, for a
-- function created since). The password is hashed by the server as its
-- password_encryption says. Needs CREATEROLE; an unknown tenant raises P0002.
CREATE OR REPLACE FUNCTION ordo.create_app_role(tenant_slug text, role_name text, password text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant bigint;
BEGIN
    SELECT t.id INTO v_tenant FROM ordo.tenants t WHERE t.slug = tenant_slug;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'tenant % not found', tenant_slug USING ERRCODE = 'no_data_found';
    END IF;
    EXECUTE format('CREATE ROLE %I LOGIN NOINHERIT NOCREATEDB NOCREATEROLE PASSWORD %L', role_name, password);
    EXECUTE format('GRANT USAGE ON SCHEMA ordo TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION ordo.enqueue_my_message(text, text, text, jsonb) TO %I', role_name);
    EXECUTE format('GRANT SELECT ON ordo.my_messages TO %I', role_name);
    REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ordo FROM PUBLIC;
    INSERT INTO ordo.app_roles (role_name, tenant_id) VALUES (create_app_role.role_name, v_tenant);
END;
$$;
