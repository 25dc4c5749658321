-- A tenant's handler answering 502/503/504 goes down on evidence, as its
-- number does (000041), not on one answer: one 503 among a stream of
-- answers (a proxy in front of several n8n workers, one restarting) must
-- not hold every conversation of the tenant. The evidence lives on the
-- tenant row (jobs/evidence.go, ordo.handler_failed): the handler's
-- failures since handler_fail_since, and the tenant's count of handler
-- answers (ordo.stats_minutes.handled, bumped where handle steps finish)
-- when that evidence began, so that any answer since voids it.
ALTER TABLE ordo.tenants
    ADD COLUMN handler_fail_steps bigint[],
    ADD COLUMN handler_fail_since timestamptz,
    ADD COLUMN handler_fail_ok    bigint;

ALTER TABLE ordo.stats_minutes ADD COLUMN handled bigint NOT NULL DEFAULT 0;
