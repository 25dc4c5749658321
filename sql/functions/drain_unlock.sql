-- ordo.drain_unlock releases conversation p_conv's drain lock
-- (ordo.drain_key) and leaves the session the lease p_lease_ms
-- (ordo.drain_lease): 0 when the session holds no other conversation, the
-- batch's lease while it still holds some of a batch, NULL to leave it as
-- it is (ordo.claim letting a conversation it tried go). False when the lock
-- was not held (a fenced drain whose session Postgres ended, on a new
-- connection). A drain ends through here — ordo.park_conversation, the
-- drain's own unlock when it ends otherwise (jobs/session.go) — or,
-- set-based, in ordo.finish through the same key.
--
-- A session lock is not transactional, but every caller releases it in a
-- transaction that holds the conversation's row lock (or one that wrote
-- nothing), and the next drain's takeover waits for that row lock: it sees
-- every write of this drain.
CREATE OR REPLACE FUNCTION ordo.drain_unlock(p_conv bigint, p_lease_ms int) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_held boolean;
BEGIN
    SELECT pg_advisory_unlock(k.ns, k.key) INTO v_held FROM ordo.drain_key(p_conv) k;
    IF p_lease_ms IS NOT NULL THEN
        PERFORM ordo.drain_lease(p_lease_ms);
    END IF;
    RETURN v_held;
END;
$$;
