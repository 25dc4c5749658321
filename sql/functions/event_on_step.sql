-- ordo.event_on_step writes a send step's events, in the transaction that
-- changed the step: message.sent when the send is done (the provider took
-- it), message.delivered|read|failed when Meta's status webhook raises the
-- step's provider status (one event per change: a delivery carrying both
-- delivered and read records, and tells, read). Meta's own "sent" status
-- adds nothing to message.sent and is not told. Only for a tenant with an
-- events_url. The trigger is defined below, with its function: a changed
-- file drops both and creates both (sql.applyFunctions).
CREATE OR REPLACE FUNCTION ordo.event_on_step() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_type text;
    v_m    record;
BEGIN
    IF NEW.status = 'done' AND OLD.status IS DISTINCT FROM 'done' THEN
        v_type := 'message.sent';
    ELSIF NEW.provider_status IN ('delivered', 'read', 'failed')
          AND NEW.provider_status IS DISTINCT FROM OLD.provider_status THEN
        v_type := 'message.' || NEW.provider_status;
    ELSE
        RETURN NULL;
    END IF;
    SELECT m.tenant_id, m.conversation_pk, m.message_id, m.seq, c.conversation_id INTO v_m
    FROM ordo.messages m
    JOIN ordo.tenants t ON t.id = m.tenant_id
    JOIN ordo.conversations c ON c.id = m.conversation_pk
    WHERE m.id = NEW.message_pk AND t.events_url IS NOT NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    VALUES (v_m.tenant_id, v_m.conversation_pk, v_type, jsonb_strip_nulls(jsonb_build_object(
        'conversation_id', v_m.conversation_id, 'message_id', v_m.message_id, 'seq', v_m.seq,
        'step_id', NEW.id::text, 'provider_message_id', NEW.provider_message_id,
        'error', CASE WHEN v_type = 'message.failed' THEN NEW.errors->-1->>'error' END)));
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_step AFTER UPDATE OF status, provider_status ON ordo.steps
FOR EACH ROW WHEN (NEW.kind = 'send' AND (
    (NEW.status = 'done' AND OLD.status IS DISTINCT FROM 'done') OR
    (NEW.provider_status IN ('delivered', 'read', 'failed') AND NEW.provider_status IS DISTINCT FROM OLD.provider_status)))
EXECUTE FUNCTION ordo.event_on_step();
