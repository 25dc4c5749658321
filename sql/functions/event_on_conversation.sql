-- ordo.event_on_conversation writes conversation.halted when a
-- conversation halts (its head message dead-lettered under the tenant's
-- halt policy), in that transaction, for a tenant with an events_url. The
-- trigger is defined below, with its function; it fires only for updates
-- that set halted_at, so the drain's many conversation writes do not call it.
CREATE OR REPLACE FUNCTION ordo.event_on_conversation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    SELECT NEW.tenant_id, NEW.id, 'conversation.halted', jsonb_build_object(
        'conversation_id', NEW.conversation_id, 'head_seq', NEW.head_seq, 'last_seq', NEW.last_seq)
    FROM ordo.tenants t WHERE t.id = NEW.tenant_id AND t.events_url IS NOT NULL;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_conversation AFTER UPDATE OF halted_at ON ordo.conversations
FOR EACH ROW WHEN (OLD.halted_at IS NULL AND NEW.halted_at IS NOT NULL)
EXECUTE FUNCTION ordo.event_on_conversation();
