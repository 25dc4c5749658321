-- ordo.event_on_dead_letter writes message.dead_lettered for a new dead
-- letter, in its transaction (a step out of attempts, a permanent error,
-- Meta's failed status, an async handler past its deadline: every path
-- that inserts one), for a tenant with an events_url. The trigger is
-- defined below, with its function.
CREATE OR REPLACE FUNCTION ordo.event_on_dead_letter() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_m record;
BEGIN
    SELECT m.conversation_pk, m.message_id, m.seq, c.conversation_id INTO v_m
    FROM ordo.messages m
    JOIN ordo.tenants t ON t.id = m.tenant_id
    JOIN ordo.conversations c ON c.id = m.conversation_pk
    WHERE m.id = NEW.message_pk AND t.events_url IS NOT NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    VALUES (NEW.tenant_id, v_m.conversation_pk, 'message.dead_lettered', jsonb_strip_nulls(jsonb_build_object(
        'conversation_id', v_m.conversation_id, 'message_id', v_m.message_id, 'seq', v_m.seq,
        'dead_letter_id', NEW.id::text, 'step_id', NEW.step_id::text, 'reason', NEW.reason)));
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_dead_letter AFTER INSERT ON ordo.dead_letters
FOR EACH ROW EXECUTE FUNCTION ordo.event_on_dead_letter();
