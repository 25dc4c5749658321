-- ordo.handler_failed records that a call of tenant p_tenant's handler (for
-- step p_step) did not reach it (p_reason), and answers what that is:
--   'message' — no evidence yet that the handler is away: the call's own
--               failure, retried as any other (one 503 among answers);
--               failures: how many the evidence holds now, this one
--               included (1: none before it, or an answer since);
--   'suspect' — p_min failures with no answer of the handler since the
--               first, but over less than p_min_span_ms: wait is when that
--               span will have passed;
--   'down'    — the handler is unreachable; went_down: this call decided
--               it (the caller logs it once); wait is the time until the
--               next probe. A failed probe (p_probe) doubles the time
--               between probes (ordo.probe_backoff); the failure
--               of a drain that did not know the handler was down leaves it.
-- p_immediate: the handler said plainly it is not there (a refused
-- connection, a DNS failure, n8n's 404 or 410): down at once. Otherwise
-- (502, 503, 504) the evidence decides: the rule of jobs/evidence.go
-- (ordo.dependency_evidence), kept on the tenant row (handler_fail_steps,
-- _since, _ok) so that every process sees it, the same message's retries
-- counting, voided by any answer of the handler (the tenant's handled
-- counter in ordo.stats_minutes). p_at stands for now() (tests; NULL: now).
--
-- Locks: the tenant row only (sql/LOCKING.md level 1), in a transaction of
-- its own, before the caller's conversation write; the counters are read
-- without a lock.
CREATE OR REPLACE FUNCTION ordo.handler_failed(p_tenant bigint, p_step bigint, p_probe boolean, p_reason text,
    p_immediate boolean, p_min int, p_min_span_ms bigint, p_horizon_ms bigint, p_max_ms bigint, p_at timestamptz,
    OUT verdict text, OUT went_down boolean, OUT wait interval, OUT failures int)
LANGUAGE plpgsql AS $$
DECLARE
    v_now   timestamptz := coalesce(p_at, now());
    v_down  timestamptz;
    v_steps bigint[];
    v_since timestamptz;
    v_base  bigint;
BEGIN
    verdict := 'message';
    went_down := false;
    SELECT t.handler_down_since, t.handler_fail_steps, t.handler_fail_since, t.handler_fail_ok
    INTO v_down, v_steps, v_since, v_base
    FROM ordo.tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_down IS NOT NULL AND NOT p_probe THEN
        -- Down already, and this drain did not know: the probes' pace stays.
        SELECT greatest(t.handler_probe_at - v_now, interval '0') INTO wait FROM ordo.tenants t WHERE t.id = p_tenant;
        verdict := 'down';
        RETURN;
    ELSIF v_down IS NOT NULL THEN
        -- A probe failed.
        UPDATE ordo.tenants t SET
            handler_down_reason = p_reason,
            handler_down_probes = t.handler_down_probes + 1,
            handler_probe_at    = v_now + ordo.probe_backoff(t.handler_down_probes + 1, p_max_ms)
        WHERE t.id = p_tenant
        RETURNING t.handler_probe_at - v_now INTO wait;
        verdict := 'down';
        RETURN;
    END IF;
    IF p_immediate THEN
        verdict := 'down';
    ELSE
        SELECT e.steps, e.since, e.base, e.verdict, e.wait INTO v_steps, v_since, v_base, verdict, wait
        FROM ordo.dependency_evidence(p_tenant, 'handled', v_steps, v_since, v_base,
            p_step, false, p_min, p_min_span_ms, p_horizon_ms, v_now) e;
    END IF;
    IF verdict = 'down' THEN
        UPDATE ordo.tenants t SET
            handler_down_since  = v_now,
            handler_down_reason = p_reason,
            handler_down_probes = 1,
            handler_probe_at    = v_now + ordo.probe_backoff(1, p_max_ms),
            handler_fail_steps  = NULL, handler_fail_since = NULL, handler_fail_ok = NULL
        WHERE t.id = p_tenant
        RETURNING t.handler_probe_at - v_now INTO wait;
        went_down := true;
        RETURN;
    END IF;
    UPDATE ordo.tenants t SET handler_fail_steps = v_steps, handler_fail_since = v_since, handler_fail_ok = v_base
    WHERE t.id = p_tenant;
    failures := cardinality(v_steps);
END;
$$;
