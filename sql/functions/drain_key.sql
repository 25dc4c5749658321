-- ordo.drain_key is conversation p_conv's drain lock: the two keys of the
-- session advisory lock a drain holds while it owns the conversation. The
-- one place the key is made (sql/LIFECYCLE.md): ordo.claim takes it,
-- ordo.drain_unlock releases it. The first key is ordo's namespace ("ordo"
-- in ASCII), apart from River's and an application's own locks; a tenant's
-- concurrency slots use negative first keys (ordo.claim).
--
-- A table of one row, not OUT parameters: a one-SELECT SQL function that
-- returns a table is inlined into the query that calls it (FROM
-- ordo.drain_key(x) k), so the key costs nothing beside the lock call; one
-- returning a record ran as a function scan of its own, 20 µs a lock or
-- unlock against 3.
CREATE OR REPLACE FUNCTION ordo.drain_key(p_conv bigint) RETURNS TABLE (ns int, key int)
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 1 AS $$
SELECT 1869767791, (p_conv % 2147483647)::int
$$;
