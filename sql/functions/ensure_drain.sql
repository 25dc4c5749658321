-- ordo.ensure_drain puts conversation conv in the ready set when it has work
-- and is not halted (replay, skip, the reconciler's orphans; ingest does the
-- same in ordo.enqueue_message). A conversation already in the set keeps its
-- place. True when it added conv.
CREATE OR REPLACE FUNCTION ordo.ensure_drain(conv bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_c record;
BEGIN
    SELECT c.tenant_id, c.halted_at, c.head_seq, c.last_seq INTO v_c
    FROM ordo.conversations c WHERE c.id = conv FOR NO KEY UPDATE;
    IF NOT FOUND OR v_c.halted_at IS NOT NULL OR v_c.head_seq >= v_c.last_seq THEN
        RETURN false;
    END IF;
    RETURN ordo.make_ready(conv, v_c.tenant_id);
END;
$$;
