-- A send step may be 'unchecked' (issue 23): an outbound message that came
-- in through SQL (ordo.enqueue_message without checked => true: another
-- application's, no Go in front of it) is stored with its send step, which
-- its drain checks against WhatsApp's message schema once before the first
-- attempt (with the tenant's other unchecked sends at the heads of its
-- conversations: those that pass lose the step, those that fail become
-- 'refused', which their own drain dead-letters). Messages ordo's own
-- ingest accepted were checked there and are not checked again.
ALTER TABLE ordo.steps DROP CONSTRAINT steps_status_check;
ALTER TABLE ordo.steps
    ADD CONSTRAINT steps_status_check
        CHECK (status IN ('unchecked', 'refused', 'pending', 'running', 'waiting', 'unknown', 'done', 'failed'));
-- Outbound messages queued before this, not started: where they came from
-- is not recorded, so each is checked once by its drain (the drain used to
-- check every send).
INSERT INTO ordo.steps (message_pk, idx, kind, request, status)
SELECT m.id, 0, 'send', m.payload, 'unchecked' FROM ordo.messages m
WHERE m.direction = 'outbound' AND m.status = 'queued'
  AND NOT EXISTS (SELECT 1 FROM ordo.steps s WHERE s.message_pk = m.id);
