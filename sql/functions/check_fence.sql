-- ordo.check_fence starts every write transaction of a drain. It locks the
-- conversation row FOR NO KEY UPDATE to commit — the mode every drain write
-- needs, so no drain transaction ever upgrades its lock on the row after
-- touching another (sql/LOCKING.md) — so a takeover (which bumps the fence
-- under FOR UPDATE) waits for the write, and it raises ORF01 when the token
-- is stale so the whole transaction rolls back.
CREATE OR REPLACE FUNCTION ordo.check_fence(conv bigint, token bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ordo.conversations c WHERE c.id = conv AND c.fence = token FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', token, conv USING ERRCODE = 'ORF01';
    END IF;
END;
$$;
