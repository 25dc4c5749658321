-- ordo.stats_on_step counts the sends that the provider took (send steps
-- that became done) in their tenants' minute of ordo.stats_minutes (the
-- overview's sent/min), the handler's answers (handle steps that became
-- done or waiting for posted replies: handled, the evidence that voids a
-- suspicion of the handler, ordo.dependency_failed) and, for each message's first send, the time from its
-- acceptance into the latency histogram (bucket 1: under 1 ms; bucket i:
-- [1.25^(i-2), 1.25^(i-1)) ms; the last bucket also holds anything longer).
-- Sharded as ordo.stats_on_message.
--
-- Once per statement, over its transition tables: a batch's finish
-- (ordo.finish) records many sends in one UPDATE, and counting each
-- row by itself (four statements a row) cost a third of that UPDATE. One
-- upsert per tenant and latency bucket of the statement now. A
-- statement trigger with transition tables cannot name columns (UPDATE OF),
-- so it runs after every UPDATE of ordo.steps and finds nothing to count in
-- most: one query over the statement's own rows.
-- The trigger is defined below, with its function: a changed file drops
-- both and creates both (sql.applyFunctions).
CREATE OR REPLACE FUNCTION ordo.stats_on_step() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_r     record;
    v_shard int;
    v_hist  int[];
BEGIN
    -- Per tenant and latency bucket (NULL: sends that were not their
    -- message's first), one upsert each: a round's sends fall in a few.
    FOR v_r IN
        SELECT m.tenant_id,
               CASE WHEN n.kind = 'send' AND e.earlier IS NULL
                    THEN least(80, greatest(1, 2 + floor(ln(greatest(extract(epoch FROM
                        coalesce(n.finished_at, clock_timestamp()) - m.created_at) * 1000, 0.001)) / ln(1.25))::int))
               END AS bucket,
               (count(*) FILTER (WHERE n.kind = 'send'))::int AS n,
               (count(*) FILTER (WHERE n.kind = 'handle'))::int AS h
        FROM stats_new_steps n
        JOIN stats_old_steps o ON o.id = n.id
        JOIN ordo.messages m ON m.id = n.message_pk
        -- An earlier send of the message (then this is not its first):
        -- probed per row, never a hash of every step.
        LEFT JOIN LATERAL (
            SELECT 1 AS earlier FROM ordo.steps f
            WHERE n.kind = 'send' AND n.idx > 0 AND f.message_pk = n.message_pk AND f.kind = 'send' AND f.idx < n.idx
            LIMIT 1) e ON true
        WHERE n.kind = 'send' AND n.status = 'done' AND o.status IS DISTINCT FROM 'done'
           OR n.kind = 'handle' AND n.status IN ('done', 'waiting') AND o.status NOT IN ('done', 'waiting')
        GROUP BY 1, 2
    LOOP
        v_shard := ordo.stats_shard(v_r.tenant_id);
        IF v_r.bucket IS NULL THEN
            INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, sent, handled)
            VALUES (date_trunc('minute', now()), v_r.tenant_id, v_shard, v_r.n, v_r.h)
            ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET
                sent = s.sent + EXCLUDED.sent, handled = s.handled + EXCLUDED.handled;
        ELSE
            v_hist := array_fill(0, ARRAY[80]);
            v_hist[v_r.bucket] := v_r.n;
            INSERT INTO ordo.stats_minutes AS s (minute, tenant_id, shard, sent, latency)
            VALUES (date_trunc('minute', now()), v_r.tenant_id, v_shard, v_r.n, v_hist)
            ON CONFLICT (minute, tenant_id, shard) DO UPDATE SET
                sent = s.sent + EXCLUDED.sent,
                latency[v_r.bucket] = s.latency[v_r.bucket] + EXCLUDED.sent;
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER stats_on_step AFTER UPDATE ON ordo.steps
REFERENCING OLD TABLE AS stats_old_steps NEW TABLE AS stats_new_steps
FOR EACH STATEMENT EXECUTE FUNCTION ordo.stats_on_step();
