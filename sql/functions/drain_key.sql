-- ordo.drain_key is conversation p_conv's drain lock: the two keys of the
-- session advisory lock a drain holds while it owns the conversation. The
-- one place the key is made (sql/LIFECYCLE.md): ordo.claim takes it,
-- ordo.drain_unlock releases it. The first key is ordo's namespace ("ordo"
-- in ASCII), apart from River's and an application's own locks; a tenant's
-- concurrency slots use negative first keys (ordo.claim).
CREATE OR REPLACE FUNCTION ordo.drain_key(p_conv bigint, OUT ns int, OUT key int)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT 1869767791, (p_conv % 2147483647)::int
$$;
