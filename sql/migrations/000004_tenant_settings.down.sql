ALTER TABLE ordo.tenants
    DROP COLUMN weight, DROP COLUMN max_concurrency, DROP COLUMN handler_mode,
    DROP COLUMN handler_timeout_ms, DROP COLUMN reply_deadline_ms, DROP COLUMN events_url;
