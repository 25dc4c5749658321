-- What a tenant depends on whose outage is a state (issue 23): its handler
-- (000014, 000042) and its WhatsApp number through the Cloud API (000041)
-- each had their own columns on the tenant row and their own near-copies
-- of the same functions. One row per tenant and dependency now holds that
-- state, and one set of functions (ordo.dependency_failed,
-- ordo.dependency_probe, ordo.dependency_back) takes the dependency as an
-- argument.
--
-- A row exists from the tenant's first outage-class failure of that
-- dependency on (ordo.dependency_failed inserts it) and is kept, cleared,
-- when the dependency is back: every transition after the first is then an
-- update of one row that is there, so the probe, the way back and a
-- drain's mark (ordo.wait_for_dependency, FOR SHARE) always meet on it and
-- never race an insert or a delete, and the events' trigger fires on one
-- column's update. No row: reachable, no evidence. At most two rows a
-- tenant; a tenant that never failed has none.
--
--   down_since  set while the dependency is unreachable (since when);
--   down_reason the failure that took it down, then the last probe's;
--   probe_at    when the next probe may go (or until when one is held);
--   probes      the failed looks since it went down (the probes' backoff);
--   fail_steps, fail_since, fail_base
--               the evidence while it is reachable (jobs/evidence.go): the
--               steps that failed outage-class since fail_since, and the
--               tenant's count of successful calls (ordo.stats_minutes:
--               handled for the handler, sent for the number) then.
--
-- Its place in sql/LOCKING.md: right after the tenant row.
CREATE TABLE ordo.dependencies (
    tenant_id   bigint      NOT NULL REFERENCES ordo.tenants (id) ON DELETE CASCADE,
    what        text        NOT NULL CHECK (what IN ('handler', 'number')),
    down_since  timestamptz,
    down_reason text,
    probe_at    timestamptz,
    probes      integer     NOT NULL DEFAULT 0,
    fail_steps  bigint[],
    fail_since  timestamptz,
    fail_base   bigint,
    PRIMARY KEY (tenant_id, what)
);

-- A tenant whose handler or number is down now stays down, its probes'
-- pace and its evidence kept.
INSERT INTO ordo.dependencies (tenant_id, what, down_since, down_reason, probe_at, probes, fail_steps, fail_since, fail_base)
SELECT t.id, 'handler', t.handler_down_since, t.handler_down_reason, t.handler_probe_at, t.handler_down_probes,
       t.handler_fail_steps, t.handler_fail_since, t.handler_fail_ok
FROM ordo.tenants t
WHERE t.handler_down_since IS NOT NULL OR t.handler_probe_at IS NOT NULL OR t.handler_fail_since IS NOT NULL
UNION ALL
SELECT t.id, 'number', t.number_down_since, t.number_down_reason, t.number_probe_at, t.number_down_probes,
       t.number_fail_steps, t.number_fail_since, t.number_fail_sent
FROM ordo.tenants t
WHERE t.number_down_since IS NOT NULL OR t.number_probe_at IS NOT NULL OR t.number_fail_since IS NOT NULL;

-- The old events' triggers name the columns; their functions, and
-- ordo.handler_failed, _probe, _back and ordo.number_failed, _probe, _back,
-- go with their files (sql.Up's function step drops a function whose file
-- is gone).
DROP TRIGGER IF EXISTS event_on_handler ON ordo.tenants;
DROP TRIGGER IF EXISTS event_on_number ON ordo.tenants;

ALTER TABLE ordo.tenants
    DROP COLUMN handler_down_since,
    DROP COLUMN handler_down_reason,
    DROP COLUMN handler_probe_at,
    DROP COLUMN handler_down_probes,
    DROP COLUMN handler_fail_steps,
    DROP COLUMN handler_fail_since,
    DROP COLUMN handler_fail_ok,
    DROP COLUMN number_down_since,
    DROP COLUMN number_down_reason,
    DROP COLUMN number_probe_at,
    DROP COLUMN number_down_probes,
    DROP COLUMN number_fail_steps,
    DROP COLUMN number_fail_since,
    DROP COLUMN number_fail_sent;
