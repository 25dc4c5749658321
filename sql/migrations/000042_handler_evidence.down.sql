ALTER TABLE ordo.stats_minutes DROP COLUMN handled;
ALTER TABLE ordo.tenants
    DROP COLUMN handler_fail_steps,
    DROP COLUMN handler_fail_since,
    DROP COLUMN handler_fail_ok;
