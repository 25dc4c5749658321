ALTER TABLE ordo.conversations RESET (fillfactor);
CREATE INDEX conversations_orphan_idx ON ordo.conversations (id)
    WHERE drain_job_id IS NULL AND head_seq < last_seq AND halted_at IS NULL;
