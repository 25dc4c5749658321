-- ordo.stats_shard returns the row of ordo.stats_minutes (its shard) that
-- the calling transaction counts on for tenant p_tenant this minute: one no
-- other transaction is counting on, so the counters never make anyone wait.
-- A transaction holds its shard by a transaction-scoped advisory lock,
-- tried (never waited for) from a start that spreads backends over
-- 16 shards; one that finds the 16 taken takes a shard of its own (its
-- transaction id), which ordo's compaction folds like the others.
--
-- Counting on a shared row, two transactions waited for each other's
-- commit: an application's import that counted its first message and then
-- needed a conversation a drain held, while that drain counted its send on
-- the same row (`make chaos`: deadlock detected; TestCountersNeverDeadlock…).
-- Now nothing waits on a counter row: a row another transaction writes is
-- one whose lock it holds.
CREATE OR REPLACE FUNCTION ordo.stats_shard(p_tenant bigint) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_start int := pg_backend_pid() % 16;
    v_shard int;
BEGIN
    FOR k IN 0 .. 15 LOOP
        v_shard := (v_start + k) % 16;
        -- Keys: "stat", then the tenant and the shard (re-entrant: the same
        -- transaction gets its own shard again).
        IF pg_try_advisory_xact_lock(1937006964, ((p_tenant % 33554432) * 64 + v_shard)::int) THEN
            RETURN v_shard;
        END IF;
    END LOOP;
    RETURN 16 + (txid_current() % 1000000000)::int;
END;
$$;
