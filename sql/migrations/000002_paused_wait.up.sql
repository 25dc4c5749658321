-- A conversation whose drain waits for its tenant's paused sending to be
-- resumed: ordo.resume_sending wakes exactly these (a drain backing off
-- for a Retry-After or a pair-rate wait keeps its time). Set by
-- ordo.reserve_send and the drain; no index (the row's updates stay HOT).
ALTER TABLE ordo.conversations ADD COLUMN paused_wait boolean NOT NULL DEFAULT false;
