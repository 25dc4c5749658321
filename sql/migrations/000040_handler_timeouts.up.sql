-- A sync handler call that times out is not made again (issue 27): the
-- n8n workflow behind it may still be running, and a retry runs it again
-- (an AI step paid for twice, its reply sent twice). retry_timeouts opts a
-- tenant whose workflow is safe to repeat back in.
ALTER TABLE ordo.tenants
    ADD COLUMN retry_timeouts boolean NOT NULL DEFAULT false,
    -- Long enough for the AI workflows n8n users build (was 30 s).
    ALTER COLUMN handler_timeout_ms SET DEFAULT 120000;

-- Tenants still on the old default get the new one; a tenant that chose
-- another timeout keeps it (one that chose exactly 30 s cannot be told
-- apart and is raised too: `ordo tenant update --handler-timeout 30s`).
UPDATE ordo.tenants SET handler_timeout_ms = 120000 WHERE handler_timeout_ms = 30000;
