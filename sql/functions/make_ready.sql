-- ordo.make_ready puts conversation p_conv (of tenant p_tenant) in the ready
-- set, due now, unless it is there already (waiting or being drained: then
-- its drain will come, or is at work, and nothing changes but p_urgent). It
-- wakes the workers' schedulers (LISTEN ordo_ready; delivered at commit, the
-- tenant id as payload: a drain of another tenant yields its runner when one
-- is waiting, jobs/scheduler.go) when it added the row. p_urgent: a user
-- waits on the conversation (ordo.enqueue_message); an urgent row stays so
-- until the conversation leaves the ready set. The caller holds the
-- conversation row's lock (sql/LOCKING.md: ready rows come after it) and
-- has checked the conversation is not halted.
CREATE OR REPLACE FUNCTION ordo.make_ready(p_conv bigint, p_tenant bigint, p_urgent boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.ready (conversation_pk, tenant_id, urgent) VALUES (p_conv, p_tenant, p_urgent)
    ON CONFLICT (conversation_pk) DO NOTHING;
    IF NOT FOUND THEN
        IF p_urgent THEN
            UPDATE ordo.ready r SET urgent = true WHERE r.conversation_pk = p_conv AND NOT r.urgent;
        END IF;
        RETURN false;
    END IF;
    PERFORM pg_notify('ordo_ready', p_tenant::text);
    RETURN true;
END;
$$;
