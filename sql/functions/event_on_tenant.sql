-- ordo.event_on_tenant writes tenant.sending_paused (with Meta's reason)
-- and tenant.sending_resumed when a tenant's sending pause starts or ends,
-- in that transaction, for a tenant with an events_url. These are the
-- tenant's own stream (conversation_pk NULL), ordered apart from its
-- conversations'. The trigger is defined below, with its function.
CREATE OR REPLACE FUNCTION ordo.event_on_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.events_url IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    VALUES (NEW.id, NULL,
        CASE WHEN NEW.sending_paused_at IS NULL THEN 'tenant.sending_resumed' ELSE 'tenant.sending_paused' END,
        jsonb_strip_nulls(jsonb_build_object('reason', NEW.sending_paused_reason)));
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_tenant AFTER UPDATE OF sending_paused_at ON ordo.tenants
FOR EACH ROW WHEN ((OLD.sending_paused_at IS NULL) <> (NEW.sending_paused_at IS NULL))
EXECUTE FUNCTION ordo.event_on_tenant();
