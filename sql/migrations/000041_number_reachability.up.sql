-- A tenant's WhatsApp number that the Cloud API does not serve (5xx
-- answers, Meta's "service unavailable" codes, refused connections,
-- timeouts) is a state of the tenant, as its handler's is (000014): its
-- conversations wait (number_wait) while one probe send at a time
-- (number_probe_at) looks for it. The state is decided from evidence kept
-- on the same row (jobs/number.go, ordo.number_failed): the distinct send
-- steps that failed so since number_fail_since, and the tenant's count of
-- successful sends (ordo.stats_minutes) when that evidence began, so that
-- any success since voids it. Past handler_outage_limit_ms the number's
-- failures count as attempts again.
ALTER TABLE ordo.tenants
    ADD COLUMN number_down_since   timestamptz,
    ADD COLUMN number_down_reason  text,
    ADD COLUMN number_probe_at     timestamptz,
    ADD COLUMN number_down_probes  integer NOT NULL DEFAULT 0,
    ADD COLUMN number_fail_steps   bigint[],
    ADD COLUMN number_fail_since   timestamptz,
    ADD COLUMN number_fail_sent    bigint;

ALTER TABLE ordo.conversations ADD COLUMN number_wait boolean NOT NULL DEFAULT false;
