-- ordo.handler_probe asks, for a tenant whose handler is unreachable,
-- whether the caller may call it now: at most one caller at a time gets
-- true (the probe), and holds the probe for p_hold (its call's timeout, so
-- that a prober that dies frees it). Everyone else gets false and how long
-- until the probe is free again; they wait for ordo.handler_back to wake
-- them, or for that time. A tenant whose handler is reachable answers true
-- at once.
--
-- Locks: the tenant row only (sql/LOCKING.md level 1), in a transaction of
-- its own.
CREATE OR REPLACE FUNCTION ordo.handler_probe(p_tenant bigint, p_hold interval,
    OUT go boolean, OUT wait interval)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET handler_probe_at = now() + p_hold
    WHERE t.id = p_tenant AND t.handler_down_since IS NOT NULL AND t.handler_probe_at <= now();
    IF FOUND THEN
        go := true;
        RETURN;
    END IF;
    SELECT t.handler_down_since IS NULL, greatest(t.handler_probe_at - now(), interval '0')
    INTO go, wait FROM ordo.tenants t WHERE t.id = p_tenant;
    go := coalesce(go, true);
END;
$$;
