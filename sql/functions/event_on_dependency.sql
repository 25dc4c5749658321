-- ordo.event_on_dependency writes tenant.handler_unreachable (with the
-- reason) and tenant.handler_back when a tenant's handler becomes
-- unreachable or answers again, and likewise tenant.number_unreachable and
-- tenant.number_back for its WhatsApp number through the Cloud API
-- (ordo.dependencies), in that transaction, for a tenant with an
-- events_url: the tenant's own stream, as ordo.event_on_tenant's. The
-- events go to the events_url, not the handler, so they reach a platform
-- whose n8n is down.
CREATE OR REPLACE FUNCTION ordo.event_on_dependency() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.events (tenant_id, conversation_pk, type, data)
    SELECT t.id, NULL,
        'tenant.' || NEW.what || CASE WHEN NEW.down_since IS NULL THEN '_back' ELSE '_unreachable' END,
        CASE WHEN NEW.down_since IS NULL
             THEN jsonb_build_object('down_since', OLD.down_since)
             ELSE jsonb_strip_nulls(jsonb_build_object('reason', NEW.down_reason, 'since', NEW.down_since)) END
    FROM ordo.tenants t WHERE t.id = NEW.tenant_id AND t.events_url IS NOT NULL;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER event_on_dependency AFTER UPDATE OF down_since ON ordo.dependencies
FOR EACH ROW WHEN ((OLD.down_since IS NULL) <> (NEW.down_since IS NULL))
EXECUTE FUNCTION ordo.event_on_dependency();
