-- ordo.insert_drain_job inserts conversation conv's drain job with id job,
-- the one place a drain job's row is shaped: the same row River's
-- Client.InsertTx makes for jobs.DrainArgs (kind ordo_drain, args
-- {"conversation","tenant"}, queue ordo, priority 1, 25 attempts;
-- TestDrainJobFromSQLIsRiverLike). It wakes River's producers (LISTEN
-- <schema>.river_insert; delivered at commit).
CREATE OR REPLACE FUNCTION ordo.insert_drain_job(conv bigint, job bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ordo.river_job (id, args, kind, max_attempts, priority, queue, state, scheduled_at)
    SELECT job, jsonb_build_object('conversation', conv, 'tenant', c.tenant_id), 'ordo_drain', 25, 1, 'ordo', 'available', now()
    FROM ordo.conversations c WHERE c.id = conv;
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
END;
$$;
