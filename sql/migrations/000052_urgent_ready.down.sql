DROP INDEX IF EXISTS ordo.ready_urgent_idx;
ALTER TABLE ordo.ready DROP COLUMN IF EXISTS urgent;
