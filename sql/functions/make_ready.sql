-- ordo.make_ready puts conversation p_conv (of tenant p_tenant) in the ready
-- set, due now, unless it is there already (waiting or being drained: then
-- its drain will come, or is at work, and nothing changes). It wakes the
-- workers' schedulers (LISTEN ordo_ready; delivered at commit, the tenant id
-- as payload: a drain of another tenant yields its runner when one is
-- waiting, jobs/scheduler.go) when it added the row. The caller holds the conversation row's lock (sql/LOCKING.md) and
-- has checked the conversation is not halted.
CREATE OR REPLACE FUNCTION ordo.make_ready(p_conv bigint, p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.ready (conversation_pk, tenant_id) VALUES (p_conv, p_tenant)
    ON CONFLICT (conversation_pk) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('ordo_ready', p_tenant::text);
    RETURN true;
END;
$$;
