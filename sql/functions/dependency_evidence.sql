-- ordo.dependency_evidence is the evidence rule of jobs/evidence.go, for
-- ordo.dependency_failed: is one more outage-class failure (of step
-- p_step, at p_now) of a tenant's dependency p_what the message's own, or
-- evidence that the dependency is away? The evidence so far is p_steps
-- (the failures' steps since p_since) and p_base (the tenant's count of
-- successful calls in ordo.stats_minutes — sent for the 'number', handled
-- for the 'handler' — when it began); it is void once
-- older than p_horizon_ms or once that count grew, and counting starts
-- again. p_min failures (different steps when p_distinct) spanning at least
-- p_span_ms make verdict 'down'; as many over less, 'suspect' (wait: until
-- the span has passed); fewer, 'message'. The caller keeps steps, since and
-- base on the dependency's row (ordo.dependencies).
--
-- Locks: none (it reads ordo.stats_minutes); the caller holds the
-- dependency's row.
CREATE OR REPLACE FUNCTION ordo.dependency_evidence(p_tenant bigint, p_what text,
    p_steps bigint[], p_since timestamptz, p_base bigint,
    p_step bigint, p_distinct boolean, p_min int, p_span_ms bigint, p_horizon_ms bigint, p_now timestamptz,
    OUT steps bigint[], OUT since timestamptz, OUT base bigint, OUT verdict text, OUT wait interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_ok   bigint;
    v_span interval := make_interval(secs => p_span_ms / 1000.0);
BEGIN
    steps := p_steps;
    since := p_since;
    base := p_base;
    IF since IS NOT NULL AND since > p_now - make_interval(secs => p_horizon_ms / 1000.0) THEN
        SELECT coalesce(sum(CASE p_what WHEN 'number' THEN s.sent ELSE s.handled END), 0) INTO v_ok
        FROM generate_series(date_trunc('minute', since), date_trunc('minute', p_now), interval '1 minute') g(m)
        JOIN ordo.stats_minutes s ON s.minute = g.m AND s.tenant_id = p_tenant;
        IF v_ok > base THEN
            since := NULL; -- a call succeeded since the evidence began
        END IF;
    ELSE
        since := NULL;
    END IF;
    IF since IS NULL THEN
        since := p_now;
        steps := ARRAY[]::bigint[];
        SELECT coalesce(sum(CASE p_what WHEN 'number' THEN s.sent ELSE s.handled END), 0) INTO base
        FROM ordo.stats_minutes s WHERE s.minute = date_trunc('minute', p_now) AND s.tenant_id = p_tenant;
    END IF;
    IF cardinality(steps) < p_min AND NOT (p_distinct AND p_step = ANY (steps)) THEN
        steps := steps || p_step;
    END IF;
    verdict := 'message';
    IF cardinality(steps) >= p_min THEN
        IF p_now - since >= v_span THEN
            verdict := 'down';
        ELSE
            verdict := 'suspect';
            wait := since + v_span - p_now;
        END IF;
    END IF;
END;
$$;
