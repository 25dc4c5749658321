-- A tenant's handler that does not answer (connection refused, DNS, n8n's
-- 404 while it restarts, 502/503/504 from its proxy) is a state of the
-- tenant, not an attempt of each message: its conversations wait
-- (handler_wait) while one probe at a time (handler_probe_at) looks for it,
-- and dead letters come only past handler_outage_limit_ms.
ALTER TABLE ordo.tenants
    ADD COLUMN handler_down_since      timestamptz,
    ADD COLUMN handler_down_reason     text,
    ADD COLUMN handler_probe_at        timestamptz,
    ADD COLUMN handler_down_probes     integer NOT NULL DEFAULT 0,
    ADD COLUMN handler_outage_limit_ms bigint  NOT NULL DEFAULT 86400000
        CHECK (handler_outage_limit_ms BETWEEN 60000 AND 604800000);

ALTER TABLE ordo.conversations ADD COLUMN handler_wait boolean NOT NULL DEFAULT false;
