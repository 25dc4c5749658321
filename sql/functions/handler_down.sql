-- ordo.handler_down records that tenant p_tenant's handler did not answer
-- (p_reason): the tenant's handler is unreachable from then on, and the next
-- probe may go after a capped exponential backoff (1 s, 2 s, 4 s … at most
-- p_max_ms, with ±20 % jitter so that processes do not probe in step). It
-- answers whether this call took the handler down (the caller logs that
-- once) and how long until the next probe.
--
-- Locks: the tenant row only (sql/LOCKING.md level 1), in a transaction of
-- its own, before the caller's conversation write.
CREATE OR REPLACE FUNCTION ordo.handler_down(p_tenant bigint, p_reason text, p_max_ms bigint,
    OUT went_down boolean, OUT wait interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_probes integer;
BEGIN
    UPDATE ordo.tenants t SET
        handler_down_since  = coalesce(t.handler_down_since, now()),
        handler_down_reason = p_reason,
        handler_down_probes = t.handler_down_probes + 1,
        handler_probe_at    = now() + make_interval(secs => least(
            power(2, least(t.handler_down_probes, 20)) * 1000, p_max_ms) * (0.8 + random() * 0.4) / 1000)
    WHERE t.id = p_tenant
    RETURNING t.handler_down_probes = 1, t.handler_probe_at - now() INTO went_down, wait;
    IF NOT FOUND THEN
        went_down := false;
        wait := make_interval(secs => p_max_ms / 1000.0);
    END IF;
END;
$$;
