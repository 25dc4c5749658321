-- ordo.event_on_step writes send steps' events, in the transaction that
-- changed the steps: message.sent when a send is done (the provider took
-- it), message.delivered|read|failed when Meta's status webhook raises a
-- step's provider status (one event per change: a delivery carrying both
-- delivered and read records, and tells, read). Meta's own "sent" status
-- adds nothing to message.sent and is not told. Only for tenants with an
-- events_url.
--
-- Once per statement, over its transition tables, in step id order (a
-- conversation's sends in the order they went; a webhook delivery's
-- statuses, which it applies in step id order): a batch's finish
-- (ordo.finish) records many sends in one UPDATE, and a query per row
-- cost more than the row. A statement trigger with transition tables
-- cannot name columns (UPDATE OF), so it runs after every UPDATE of
-- ordo.steps and finds nothing to tell in most: one query over the
-- statement's own rows.
-- The trigger is defined below, with its function: a changed file drops
-- both and creates both (sql.applyFunctions).
CREATE OR REPLACE FUNCTION ordo.event_on_step() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    SELECT m.tenant_id, m.conversation_pk, e.type, jsonb_strip_nulls(jsonb_build_object(
               'conversation_id', c.conversation_id, 'message_id', m.message_id, 'seq', m.seq,
               'step_id', n.id::text, 'provider_message_id', n.provider_message_id,
               'error', CASE WHEN e.type = 'message.failed' THEN n.errors->-1->>'error' END))
    FROM event_new_steps n
    JOIN event_old_steps o ON o.id = n.id
    CROSS JOIN LATERAL (SELECT CASE
        WHEN n.status = 'done' AND o.status IS DISTINCT FROM 'done' THEN 'message.sent'
        WHEN n.provider_status IN ('delivered', 'read', 'failed')
             AND n.provider_status IS DISTINCT FROM o.provider_status THEN 'message.' || n.provider_status
        END AS type) e
    JOIN ordo.messages m ON m.id = n.message_pk
    JOIN ordo.tenants t ON t.id = m.tenant_id
    JOIN ordo.conversations c ON c.id = m.conversation_pk
    WHERE n.kind = 'send' AND e.type IS NOT NULL AND t.events_url IS NOT NULL
    ORDER BY n.id;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_step AFTER UPDATE ON ordo.steps
REFERENCING OLD TABLE AS event_old_steps NEW TABLE AS event_new_steps
FOR EACH STATEMENT EXECUTE FUNCTION ordo.event_on_step();
