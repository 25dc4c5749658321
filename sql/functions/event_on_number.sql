-- ordo.event_on_number writes tenant.number_unreachable (with the reason)
-- and tenant.number_back when a tenant's WhatsApp number becomes
-- unreachable through the Cloud API or is served again, in that
-- transaction, for a tenant with an events_url: the tenant's own stream,
-- as ordo.event_on_handler's.
CREATE OR REPLACE FUNCTION ordo.event_on_number() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.events_url IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    VALUES (NEW.id, NULL,
        CASE WHEN NEW.number_down_since IS NULL THEN 'tenant.number_back' ELSE 'tenant.number_unreachable' END,
        CASE WHEN NEW.number_down_since IS NULL
             THEN jsonb_build_object('down_since', OLD.number_down_since)
             ELSE jsonb_strip_nulls(jsonb_build_object('reason', NEW.number_down_reason, 'since', NEW.number_down_since)) END);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_number AFTER UPDATE OF number_down_since ON ordo.tenants
FOR EACH ROW WHEN ((OLD.number_down_since IS NULL) <> (NEW.number_down_since IS NULL))
EXECUTE FUNCTION ordo.event_on_number();
