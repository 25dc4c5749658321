ALTER TABLE ordo.conversations DROP COLUMN handler_wait;
ALTER TABLE ordo.tenants
    DROP COLUMN handler_down_since,
    DROP COLUMN handler_down_reason,
    DROP COLUMN handler_probe_at,
    DROP COLUMN handler_down_probes,
    DROP COLUMN handler_outage_limit_ms;
