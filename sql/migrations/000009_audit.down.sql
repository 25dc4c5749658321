DROP INDEX ordo.dead_letters_open_idx;
ALTER TABLE ordo.steps DROP COLUMN provider_status_at;
DROP TABLE ordo.audit_log;
