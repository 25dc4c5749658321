-- ordo.probe_backoff is how long after a failed look at an unreachable
-- dependency (a tenant's handler, its WhatsApp number) the next probe may
-- go, p_failed looks in: 1 s, 2 s, 4 s … at most p_max_ms, with ±20 %
-- jitter so that processes do not probe in step. ordo.dependency_failed
-- paces the probes of both by it.
--
-- Locks: none.
CREATE OR REPLACE FUNCTION ordo.probe_backoff(p_failed int, p_max_ms bigint)
RETURNS interval
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN make_interval(secs => least(power(2, least(greatest(p_failed - 1, 0), 20)) * 1000, p_max_ms)
        * (0.8 + random() * 0.4) / 1000);
END;
$$;
