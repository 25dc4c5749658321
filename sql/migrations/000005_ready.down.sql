ALTER TABLE ordo.conversations ADD COLUMN drain_job_id bigint;
CREATE INDEX conversations_drain_idx ON ordo.conversations (drain_job_id) WHERE drain_job_id IS NOT NULL;
DROP TABLE ordo.ready;
