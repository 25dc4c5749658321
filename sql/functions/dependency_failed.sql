-- ordo.dependency_failed records that a call of what tenant p_tenant
-- depends on — p_what: 'handler' (its handler) or 'number' (its WhatsApp
-- number, through the Cloud API) — for step p_step did not reach it
-- (p_reason), and answers what that is:
--   'message' — no evidence yet that the dependency is away: the call's
--               own failure, retried as any other (one 503 among answers,
--               a poison message that Meta answers 500 every time);
--               failures: how many the evidence holds now, this one
--               included (1: none before it, or a success since);
--   'suspect' — enough failures with no success since the first, but over
--               less than the rule's span: wait is when that span will
--               have passed;
--   'down'    — the dependency is unreachable; went_down: this call
--               decided it (the caller logs it once); wait is the time
--               until the next probe. A failed probe (p_probe) doubles the
--               time between probes (ordo.probe_backoff, at most p_max_ms);
--               the failure of a drain that did not know it was down
--               leaves their pace.
-- p_immediate: the dependency said plainly it is not there (a refused
-- connection, a DNS failure, n8n's 404 or 410 for a handler): down at once.
-- Otherwise the evidence decides, by the caller's rule (jobs/evidence.go:
-- p_min failures, of different steps when p_distinct, spanning p_span_ms,
-- none older than p_horizon_ms; ordo.dependency_evidence), kept on the
-- dependency's row so that every process sees it and voided by any
-- success of the tenant's calls since it began. p_at stands for now()
-- (tests; NULL: now).
--
-- Locks: the dependency's row only (sql/LOCKING.md: after the tenant's),
-- in a transaction of its own, before the caller's conversation write; the
-- tenant's first failure inserts it (a new row: the foreign key takes KEY
-- SHARE on the tenant row, which no tenant write waits for). The counters
-- are read without a lock.
CREATE OR REPLACE FUNCTION ordo.dependency_failed(p_tenant bigint, p_what text, p_step bigint, p_probe boolean,
    p_reason text, p_immediate boolean, p_min int, p_distinct boolean, p_span_ms bigint, p_horizon_ms bigint,
    p_max_ms bigint, p_at timestamptz,
    OUT verdict text, OUT went_down boolean, OUT wait interval, OUT failures int)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := coalesce(p_at, now());
    v_dep ordo.dependencies;
    v_ev  record;
BEGIN
    verdict := 'message';
    went_down := false;
    INSERT INTO ordo.dependencies (tenant_id, what)
    SELECT t.id, p_what FROM ordo.tenants t WHERE t.id = p_tenant
    ON CONFLICT DO NOTHING;
    SELECT * INTO v_dep FROM ordo.dependencies d
    WHERE d.tenant_id = p_tenant AND d.what = p_what FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN; -- no such tenant
    END IF;
    IF v_dep.down_since IS NOT NULL AND NOT p_probe THEN
        -- Down already, and this drain did not know: the probes' pace stays.
        wait := greatest(v_dep.probe_at - v_now, interval '0');
        verdict := 'down';
        RETURN;
    ELSIF v_dep.down_since IS NOT NULL THEN
        -- A probe failed.
        UPDATE ordo.dependencies d SET
            down_reason = p_reason,
            probes      = d.probes + 1,
            probe_at    = v_now + ordo.probe_backoff(d.probes + 1, p_max_ms)
        WHERE d.tenant_id = p_tenant AND d.what = p_what
        RETURNING d.probe_at - v_now INTO wait;
        verdict := 'down';
        RETURN;
    END IF;
    IF p_immediate THEN
        verdict := 'down';
    ELSE
        SELECT * INTO v_ev FROM ordo.dependency_evidence(p_tenant, p_what, v_dep.fail_steps, v_dep.fail_since,
            v_dep.fail_base, p_step, p_distinct, p_min, p_span_ms, p_horizon_ms, v_now) e;
        verdict := v_ev.verdict;
        wait := v_ev.wait;
    END IF;
    IF verdict = 'down' THEN
        UPDATE ordo.dependencies d SET
            down_since  = v_now,
            down_reason = p_reason,
            probes      = 1,
            probe_at    = v_now + ordo.probe_backoff(1, p_max_ms),
            fail_steps  = NULL, fail_since = NULL, fail_base = NULL
        WHERE d.tenant_id = p_tenant AND d.what = p_what
        RETURNING d.probe_at - v_now INTO wait;
        went_down := true;
        RETURN;
    END IF;
    UPDATE ordo.dependencies d SET fail_steps = v_ev.steps, fail_since = v_ev.since, fail_base = v_ev.base
    WHERE d.tenant_id = p_tenant AND d.what = p_what;
    failures := cardinality(v_ev.steps);
END;
$$;
