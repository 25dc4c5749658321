-- The tenant row's columns of 000014, 000041 and 000042 again, with the
-- state of ordo.dependencies (a tenant down now stays down). The older
-- binary's function step brings back its functions and their triggers.
ALTER TABLE ordo.tenants
    ADD COLUMN handler_down_since  timestamptz,
    ADD COLUMN handler_down_reason text,
    ADD COLUMN handler_probe_at    timestamptz,
    ADD COLUMN handler_down_probes integer NOT NULL DEFAULT 0,
    ADD COLUMN number_down_since   timestamptz,
    ADD COLUMN number_down_reason  text,
    ADD COLUMN number_probe_at     timestamptz,
    ADD COLUMN number_down_probes  integer NOT NULL DEFAULT 0,
    ADD COLUMN number_fail_steps   bigint[],
    ADD COLUMN number_fail_since   timestamptz,
    ADD COLUMN number_fail_sent    bigint,
    ADD COLUMN handler_fail_steps  bigint[],
    ADD COLUMN handler_fail_since  timestamptz,
    ADD COLUMN handler_fail_ok     bigint;

UPDATE ordo.tenants t SET
    handler_down_since = d.down_since, handler_down_reason = d.down_reason, handler_probe_at = d.probe_at,
    handler_down_probes = d.probes, handler_fail_steps = d.fail_steps, handler_fail_since = d.fail_since,
    handler_fail_ok = d.fail_base
FROM ordo.dependencies d WHERE d.tenant_id = t.id AND d.what = 'handler';

UPDATE ordo.tenants t SET
    number_down_since = d.down_since, number_down_reason = d.down_reason, number_probe_at = d.probe_at,
    number_down_probes = d.probes, number_fail_steps = d.fail_steps, number_fail_since = d.fail_since,
    number_fail_sent = d.fail_base
FROM ordo.dependencies d WHERE d.tenant_id = t.id AND d.what = 'number';

DROP TABLE ordo.dependencies;
