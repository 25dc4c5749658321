-- Async handlers (issue 16): a handle step whose handler answered that its
-- replies will be posted later (handler_mode async, or a 202) waits for
-- them, and the replies endpoint leaves them on the step for the drain.
ALTER TABLE ordo.steps DROP CONSTRAINT steps_status_check;
ALTER TABLE ordo.steps
    -- waiting: a handle step whose handler was called and answered that the
    -- replies will be posted to /v1/messages/{message_id}/replies.
    ADD CONSTRAINT steps_status_check
        CHECK (status IN ('pending', 'running', 'waiting', 'unknown', 'done', 'failed')),
    -- The replies posted for a handle step (a JSON array), kept as posted: the
    -- drain turns them into the message's send steps, and a repeat of the
    -- same post is recognised by them.
    ADD COLUMN replies        jsonb,
    -- Until when a waiting handle step waits for its replies (the call's
    -- start plus the tenant's reply_deadline_ms); after it the dead-letter
    -- policy applies.
    ADD COLUMN replies_due_at timestamptz;
