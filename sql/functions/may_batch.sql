-- ordo.may_batch says whether tenant p_tenant's sends from number p_phone
-- may go in batches (jobs/batch.go): only when a send needs nothing but
-- its turn. The tenant is not paused, not paced (send_rate 0), has no pair
-- gap and no concurrency cap, and its number is neither throttled nor
-- unreachable (ordo.dependency_failed: one probe send at a time); anything
-- else is the per-conversation drain's (ordo.reserve_send). Checked when a
-- batch is claimed (ordo.claim) and again before each round starts
-- its conversations' next messages (ordo.finish): Meta may pause the
-- tenant or throttle the number, or an operator change it, while a batch
-- runs.
--
-- PL/pgSQL, which keeps its statement's plan for the session: a SQL
-- function with subqueries is never inlined, and its body was planned
-- again on every call (a claim and every round of a batch).
CREATE OR REPLACE FUNCTION ordo.may_batch(p_tenant bigint, p_phone text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN p_phone IS NOT NULL
       AND EXISTS (
            SELECT 1 FROM ordo.tenants t
            WHERE t.id = p_tenant AND t.sending_paused_at IS NULL AND t.send_rate = 0
              AND t.pair_gap_ms = 0 AND t.max_concurrency = 0)
       AND NOT EXISTS (
            SELECT 1 FROM ordo.dependencies d
            WHERE d.tenant_id = p_tenant AND d.what = 'number' AND d.down_since IS NOT NULL)
       AND NOT EXISTS (
            SELECT 1 FROM ordo.send_pacing p
            WHERE p.phone_number_id = p_phone AND p.next_slot > clock_timestamp());
END;
$$;
