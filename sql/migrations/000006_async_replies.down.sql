UPDATE ordo.steps SET status = 'pending' WHERE status = 'waiting';
ALTER TABLE ordo.steps DROP CONSTRAINT steps_status_check;
ALTER TABLE ordo.steps
    ADD CONSTRAINT steps_status_check CHECK (status IN ('pending', 'running', 'unknown', 'done', 'failed')),
    DROP COLUMN replies,
    DROP COLUMN replies_due_at;
