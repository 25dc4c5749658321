-- ordo.drain_lease sets the calling session's lease to p_ms milliseconds (0:
-- none): its idle_session_timeout. A drain's session that says nothing for
-- that long (its worker stalled, partitioned or dead) is ended by Postgres,
-- which releases every lock it held to other workers; the drain's later
-- writes fail on the dead connection or, through another, on the fence.
-- The one place the lease is set (sql/LIFECYCLE.md): ordo.claim when it
-- takes conversations, a drain lengthening it for a long call
-- (jobs/session.go), ordo.drain_unlock when it lets one go.
--
-- PL/pgSQL, which keeps its statement's plan for the session: as a SQL
-- function returning void it was never inlined, and its body was planned
-- again on every call (twice a drain).
CREATE OR REPLACE FUNCTION ordo.drain_lease(p_ms int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('idle_session_timeout', p_ms::text, false);
END;
$$;
