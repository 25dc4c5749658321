-- ordo.drain_lock tries conversation p_conv's drain lock (ordo.drain_key)
-- for the calling session: true when it has it now. Never waited for: a
-- conversation another drain holds is passed over (ordo.claim).
CREATE OR REPLACE FUNCTION ordo.drain_lock(p_conv bigint) RETURNS boolean
LANGUAGE sql AS $$
SELECT pg_try_advisory_lock(k.ns, k.key) FROM ordo.drain_key(p_conv) k
$$;
