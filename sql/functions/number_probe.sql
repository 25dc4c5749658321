-- ordo.number_probe asks, for a tenant whose WhatsApp number is
-- unreachable (ordo.number_failed), whether the caller may send now: at
-- most one caller at a time gets true (the probe send), and holds the
-- probe for p_hold (its send's timeout, so that a prober that dies frees
-- it). Everyone else gets false and how long until the probe is free
-- again; they wait for ordo.number_back to wake them, or for that time. A
-- tenant whose number is reachable answers true at once.
--
-- Locks: the tenant row only (sql/LOCKING.md level 1), in a transaction of
-- its own.
CREATE OR REPLACE FUNCTION ordo.number_probe(p_tenant bigint, p_hold interval,
    OUT go boolean, OUT wait interval)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET number_probe_at = now() + p_hold
    WHERE t.id = p_tenant AND t.number_down_since IS NOT NULL AND t.number_probe_at <= now();
    IF FOUND THEN
        go := true;
        RETURN;
    END IF;
    SELECT t.number_down_since IS NULL, greatest(t.number_probe_at - now(), interval '0')
    INTO go, wait FROM ordo.tenants t WHERE t.id = p_tenant;
    go := coalesce(go, true);
END;
$$;
