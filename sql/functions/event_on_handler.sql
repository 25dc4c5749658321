-- ordo.event_on_handler writes tenant.handler_unreachable (with the reason)
-- and tenant.handler_back when a tenant's handler becomes unreachable or
-- answers again, in that transaction, for a tenant with an events_url: the
-- tenant's own stream, as ordo.event_on_tenant's. The events go to the
-- events_url, not the handler, so they reach a platform whose n8n is down.
CREATE OR REPLACE FUNCTION ordo.event_on_handler() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.events_url IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    VALUES (NEW.id, NULL,
        CASE WHEN NEW.handler_down_since IS NULL THEN 'tenant.handler_back' ELSE 'tenant.handler_unreachable' END,
        CASE WHEN NEW.handler_down_since IS NULL
             THEN jsonb_build_object('down_since', OLD.handler_down_since)
             ELSE jsonb_strip_nulls(jsonb_build_object('reason', NEW.handler_down_reason, 'since', NEW.handler_down_since)) END);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_handler AFTER UPDATE OF handler_down_since ON ordo.tenants
FOR EACH ROW WHEN ((OLD.handler_down_since IS NULL) <> (NEW.handler_down_since IS NULL))
EXECUTE FUNCTION ordo.event_on_handler();
