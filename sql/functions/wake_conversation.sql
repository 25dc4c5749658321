-- ordo.wake_conversation makes conversation p_conv's drain run now: one
-- waiting in the ready set (a backoff, a send slot, a paused tenant, an
-- async handler's replies) is due at once; one being drained is marked
-- woken, so that the wait its drain is about to record ends at once (no
-- wake-up is lost to a drain deciding to wait meanwhile); a conversation
-- with work and no row gets one. Anything that changes what a conversation
-- waits for (replies posted, an operator's resume) calls it after its own
-- writes, in the same transaction.
--
-- Locks: the conversation row (FOR NO KEY UPDATE), then its ready row
-- (sql/LOCKING.md).
CREATE OR REPLACE FUNCTION ordo.wake_conversation(p_conv bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant bigint;
BEGIN
    PERFORM 1 FROM ordo.conversations c WHERE c.id = p_conv FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE ordo.ready r SET woken = r.running, due_at = CASE WHEN r.running THEN r.due_at ELSE least(r.due_at, now()) END
    WHERE r.conversation_pk = p_conv
    RETURNING r.tenant_id INTO v_tenant;
    IF FOUND THEN
        PERFORM pg_notify('ordo_ready', v_tenant::text);
        RETURN;
    END IF;
    PERFORM ordo.ensure_drain(p_conv);
END;
$$;
