-- Per-tenant settings of fair scheduling (issue 11) and of the handler
-- contract and tenant events (issue 16).
ALTER TABLE ordo.tenants
    -- Share of the workers when several tenants have runnable
    -- conversations: a tenant of weight 2 gets two turns to weight 1's one.
    ADD COLUMN weight             int  NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    -- Drains of the tenant at once, across every worker process; 0 is no
    -- cap beyond the fair share.
    ADD COLUMN max_concurrency    int  NOT NULL DEFAULT 0 CHECK (max_concurrency BETWEEN 0 AND 10000),
    -- How the tenant's handler answers: sync (the replies in the answer),
    -- async (the replies posted later to /v1/messages/{id}/replies), notify
    -- (any 2xx is done; the workflow sends by itself).
    ADD COLUMN handler_mode       text NOT NULL DEFAULT 'sync' CHECK (handler_mode IN ('sync', 'async', 'notify')),
    -- How long one handler call may take.
    ADD COLUMN handler_timeout_ms int  NOT NULL DEFAULT 30000 CHECK (handler_timeout_ms BETWEEN 1000 AND 600000),
    -- How long an async handler has to post its replies before the
    -- dead-letter policy applies.
    ADD COLUMN reply_deadline_ms  int  NOT NULL DEFAULT 600000 CHECK (reply_deadline_ms BETWEEN 1000 AND 86400000),
    -- Where the tenant's events (message.sent, …) are POSTed; NULL: none.
    ADD COLUMN events_url         text;
