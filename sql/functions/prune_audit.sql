-- ordo.prune_audit deletes up to batch audit entries made before before,
-- never one younger than ordo.audit_retention_min(), and returns how many it
-- deleted (call again while it returns batch). It is the one DELETE
-- ordo.audit_log_guard lets through (it finds this function on the call
-- stack, named with its schema: hence its fixed search_path).
CREATE OR REPLACE FUNCTION ordo.prune_audit(before timestamptz, batch int DEFAULT 1000)
RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM ordo.audit_log WHERE id IN (
        SELECT a.id FROM ordo.audit_log a
        WHERE a.at < least(before, now() - ordo.audit_retention_min())
        ORDER BY a.id LIMIT batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
