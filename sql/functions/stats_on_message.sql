-- ordo.stats_on_message counts an accepted message in its tenant's minute of
-- ordo.stats_minutes (the overview's accepted/min), in the ingest's own
-- transaction, on a shard no other transaction counts on (ordo.stats_shard):
-- counting never waits, so it adds no edge to anyone's lock order. The
-- trigger is defined below, with its
-- function: a changed file drops both and creates both (sql.applyFunctions).
CREATE OR REPLACE FUNCTION ordo.stats_on_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, accepted)
    VALUES (date_trunc('minute', now()), NEW.tenant_id, ordo.stats_shard(NEW.tenant_id), 1)
    ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET accepted = s.accepted + 1;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER stats_on_message AFTER INSERT ON ordo.messages
FOR EACH ROW EXECUTE FUNCTION ordo.stats_on_message();
