ALTER TABLE ordo.conversations DROP COLUMN number_wait;
ALTER TABLE ordo.tenants
    DROP COLUMN number_down_since,
    DROP COLUMN number_down_reason,
    DROP COLUMN number_probe_at,
    DROP COLUMN number_down_probes,
    DROP COLUMN number_fail_steps,
    DROP COLUMN number_fail_since,
    DROP COLUMN number_fail_sent;
