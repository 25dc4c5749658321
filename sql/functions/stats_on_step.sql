-- ordo.stats_on_step counts a send that the provider took (its step done) in
-- its tenant's minute of ordo.stats_minutes (the overview's sent/min) and,
-- for a message's first send, the time from its acceptance into the
-- latency histogram (bucket 1: under 1 ms; bucket i: [1.25^(i-2),
-- 1.25^(i-1)) ms; the last bucket also holds anything longer). Sharded as
-- ordo.stats_on_message. The trigger is defined below, with its function.
CREATE OR REPLACE FUNCTION ordo.stats_on_step() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant  bigint;
    v_created timestamptz;
    v_bucket  int;
    v_shard   int;
BEGIN
    SELECT m.tenant_id, m.created_at INTO v_tenant, v_created FROM ordo.messages m WHERE m.id = NEW.message_pk;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_shard := ordo.stats_shard(v_tenant);
    IF EXISTS (SELECT 1 FROM ordo.steps f WHERE f.message_pk = NEW.message_pk AND f.kind = 'send' AND f.idx < NEW.idx) THEN
        INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, sent)
        VALUES (date_trunc('minute', now()), v_tenant, v_shard, 1)
        ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET sent = s.sent + 1;
        RETURN NULL;
    END IF;
    v_bucket := least(80, greatest(1, 2 + floor(ln(greatest(extract(epoch FROM coalesce(NEW.finished_at, clock_timestamp()) - v_created) * 1000, 0.001)) / ln(1.25))::int));
    -- The row with its histogram (a row ingest made has none yet), then
    -- the count: a new row started at 1 and the update made it 2.
    INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, sent, latency)
    VALUES (date_trunc('minute', now()), v_tenant, v_shard, 0,
            array_fill(0, ARRAY[80]))
    ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET latency = EXCLUDED.latency WHERE s.latency IS NULL;
    UPDATE ordo.stats_minutes s SET sent = s.sent + 1, latency[v_bucket] = s.latency[v_bucket] + 1
    WHERE s.minute = date_trunc('minute', now()) AND s.tenant_id = v_tenant AND s.shard = v_shard;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER stats_on_step AFTER UPDATE OF status ON ordo.steps
FOR EACH ROW WHEN (NEW.kind = 'send' AND NEW.status = 'done' AND OLD.status IS DISTINCT FROM 'done')
EXECUTE FUNCTION ordo.stats_on_step();
