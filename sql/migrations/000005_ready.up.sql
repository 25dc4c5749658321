-- The ready set (issue 11): one row per conversation that expects a drain,
-- which replaces one River job per conversation wake-up. due_at is when the
-- conversation may next be claimed: now for one that became runnable, the
-- end of a wait (backoff, send slot, pair gap, paused tenant, an async
-- handler's deadline) for one that waits, and claim time plus the lease for
-- one being drained — so the conversation of a drain that died is claimed
-- again when its lease is over, with nothing else to find it. Workers claim
-- from it tenant by tenant (jobs/scheduler.go, ordo.claim_conversation);
-- within a tenant the conversation due first goes first.
--
-- running: a drain claimed it and has not let go; woken: something it waits
-- for changed while it ran (ordo.wake_conversation), so its wait ends at once.
--
-- Ingest inserts the row when the conversation has none, and the drain that
-- catches the conversation up deletes it, both under the conversation row's
-- lock (sql/LOCKING.md): a message accepted while its drain finishes either
-- is seen by it or finds no row and inserts one.
CREATE TABLE ordo.ready (
    conversation_pk bigint PRIMARY KEY REFERENCES ordo.conversations (id) ON DELETE CASCADE,
    tenant_id       bigint NOT NULL,
    due_at          timestamptz NOT NULL DEFAULT now(),
    running         boolean NOT NULL DEFAULT false,
    woken           boolean NOT NULL DEFAULT false
);
-- A tenant's next conversation (claim), and each tenant's earliest due time
-- in one index probe per tenant (the scheduler's walk over active tenants).
CREATE INDEX ready_tenant_due_idx ON ordo.ready (tenant_id, due_at);

-- Conversations that had a drain job get a ready row; their River drain jobs
-- go (a running one's worker is an older ordo, stopped before migrating).
INSERT INTO ordo.ready (conversation_pk, tenant_id)
SELECT c.id, c.tenant_id FROM ordo.conversations c
WHERE c.drain_job_id IS NOT NULL AND c.halted_at IS NULL;
DELETE FROM ordo.river_job WHERE kind = 'ordo_drain' AND finalized_at IS NULL;
DROP INDEX ordo.conversations_drain_idx;
ALTER TABLE ordo.conversations DROP COLUMN drain_job_id;
