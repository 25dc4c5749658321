UPDATE ordo.tenants SET handler_timeout_ms = 30000 WHERE handler_timeout_ms = 120000;
ALTER TABLE ordo.tenants
    ALTER COLUMN handler_timeout_ms SET DEFAULT 30000,
    DROP COLUMN retry_timeouts;
