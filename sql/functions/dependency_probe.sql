-- ordo.dependency_probe asks, for a tenant whose dependency p_what (its
-- 'handler', its 'number') is unreachable (ordo.dependency_failed),
-- whether the caller may call it now: at most one caller at a time gets
-- true (the probe), and holds the probe for p_hold (its call's timeout, so
-- that a prober that dies frees it). Everyone else gets false and how long
-- until the probe is free again; they wait for ordo.dependency_back to
-- wake them, or for that time. A reachable dependency answers true at
-- once.
--
-- Locks: the dependency's row only (sql/LOCKING.md), in a transaction of
-- its own.
CREATE OR REPLACE FUNCTION ordo.dependency_probe(p_tenant bigint, p_what text, p_hold interval,
    OUT go boolean, OUT wait interval)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.dependencies d SET probe_at = now() + p_hold
    WHERE d.tenant_id = p_tenant AND d.what = p_what AND d.down_since IS NOT NULL AND d.probe_at <= now();
    IF FOUND THEN
        go := true;
        RETURN;
    END IF;
    SELECT d.down_since IS NULL, greatest(d.probe_at - now(), interval '0')
    INTO go, wait FROM ordo.dependencies d WHERE d.tenant_id = p_tenant AND d.what = p_what;
    go := coalesce(go, true);
END;
$$;
