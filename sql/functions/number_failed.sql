-- ordo.number_failed records that send step p_step of tenant p_tenant
-- failed in a way that may mean the Cloud API does not serve the tenant's
-- number (p_reason: a 5xx answer, Meta's "service unavailable" codes, a
-- refused connection, a timeout), and answers what the failure is:
--   'message' — no evidence yet that the number is away: the step's own
--               failure, settled as any other (a poison message that Meta
--               answers 500 every time stays here: it is one step);
--   'suspect' — p_min_steps different steps failed so, with no successful
--               send of the tenant since the first, but over less than
--               p_min_span_ms: wait is when that span will have passed;
--   'down'    — the number is unreachable; went_down: this call decided it
--               (the caller logs it once); wait is the time until the next
--               probe send. A failed probe (p_probe) doubles the time
--               between probes (ordo.probe_backoff); the failure
--               of a drain that did not know the number was down leaves it.
-- The evidence (number_fail_steps, _since, _sent) is the rule of
-- jobs/evidence.go (ordo.dependency_evidence) kept on the tenant row, so that
-- every process sees it: distinct steps, voided by a successful send of the
-- tenant (its sent counter in ordo.stats_minutes, which both finish paths
-- bump) — nothing is written on the success path. p_at stands for now()
-- (tests; NULL: now).
--
-- Locks: the tenant row only (sql/LOCKING.md level 1), in a transaction of
-- its own, before the caller's conversation write; the counters are read
-- without a lock.
CREATE OR REPLACE FUNCTION ordo.number_failed(p_tenant bigint, p_step bigint, p_probe boolean, p_reason text,
    p_min_steps int, p_min_span_ms bigint, p_horizon_ms bigint, p_max_ms bigint, p_at timestamptz,
    OUT verdict text, OUT went_down boolean, OUT wait interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := coalesce(p_at, now());
    v_down   timestamptz;
    v_probes integer;
    v_steps  bigint[];
    v_since  timestamptz;
    v_base   bigint;
BEGIN
    verdict := 'message';
    went_down := false;
    SELECT t.number_down_since, t.number_down_probes, t.number_fail_steps, t.number_fail_since, t.number_fail_sent
    INTO v_down, v_probes, v_steps, v_since, v_base
    FROM ordo.tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_down IS NOT NULL AND NOT p_probe THEN
        -- Down already, and this drain did not know: the probes' pace stays.
        SELECT greatest(t.number_probe_at - v_now, interval '0') INTO wait FROM ordo.tenants t WHERE t.id = p_tenant;
        verdict := 'down';
        RETURN;
    ELSIF v_down IS NOT NULL THEN
        -- A probe failed.
        UPDATE ordo.tenants t SET
            number_down_reason = p_reason,
            number_down_probes = t.number_down_probes + 1,
            number_probe_at    = v_now + ordo.probe_backoff(t.number_down_probes + 1, p_max_ms)
        WHERE t.id = p_tenant
        RETURNING t.number_probe_at - v_now INTO wait;
        verdict := 'down';
        RETURN;
    END IF;
    SELECT e.steps, e.since, e.base, e.verdict, e.wait INTO v_steps, v_since, v_base, verdict, wait
    FROM ordo.dependency_evidence(p_tenant, 'sent', v_steps, v_since, v_base,
        p_step, true, p_min_steps, p_min_span_ms, p_horizon_ms, v_now) e;
    IF verdict = 'down' THEN
        UPDATE ordo.tenants t SET
            number_down_since  = v_now,
            number_down_reason = p_reason,
            number_down_probes = 1,
            number_probe_at    = v_now + ordo.probe_backoff(1, p_max_ms),
            number_fail_steps  = NULL, number_fail_since = NULL, number_fail_sent = NULL
        WHERE t.id = p_tenant
        RETURNING t.number_probe_at - v_now INTO wait;
        went_down := true;
        RETURN;
    END IF;
    UPDATE ordo.tenants t SET number_fail_steps = v_steps, number_fail_since = v_since, number_fail_sent = v_base
    WHERE t.id = p_tenant;
END;
$$;
