-- ordo.purge_conversations deletes up to batch of tenant's conversations in
-- which no message was created at or after before, with everything in them:
-- messages (dedupe records included), steps, dead letters (open ones too) and
-- the sandbox sends their steps made, and erases their ids from the audit
-- (ordo.redact_audit). It is `ordo purge --all`.
--
-- Locks: each conversation row FOR UPDATE first, then (by cascade) its
-- messages and steps: the engine's order. A drain at work on one finishes its
-- current write (check_fence holds KEY SHARE to commit, which this waits
-- for); its next write finds no conversation and fails as fenced
-- (ordo.check_fence), and its River job ends on a conversation that is gone.
-- An ingest holding the row waits here or, if first, makes the conversation
-- newer than before and keeps it. The caller bounds the waits (lock_timeout).
CREATE OR REPLACE FUNCTION ordo.purge_conversations(tenant bigint, before timestamptz, batch int DEFAULT 100)
RETURNS TABLE (conversations int, messages int, steps int, dead_letters int, sandbox_sends int, more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    SELECT array_agg(x.id) INTO v_ids FROM (
        SELECT c.id FROM ordo.conversations c
        WHERE c.tenant_id = tenant
          AND NOT EXISTS (SELECT 1 FROM ordo.messages m WHERE m.conversation_pk = c.id AND m.created_at >= before)
        ORDER BY c.id LIMIT batch
        FOR UPDATE OF c) x;
    conversations := coalesce(cardinality(v_ids), 0);
    more := conversations = batch;
    -- A message accepted between the scan and the lock makes the
    -- conversation newer: keep it (the row lock makes this check final).
    IF conversations > 0 THEN
        SELECT array_agg(c.id) INTO v_ids FROM ordo.conversations c
        WHERE c.id = ANY (v_ids)
          AND NOT EXISTS (SELECT 1 FROM ordo.messages m WHERE m.conversation_pk = c.id AND m.created_at >= before);
        conversations := coalesce(cardinality(v_ids), 0);
    END IF;
    IF conversations = 0 THEN
        messages := 0; steps := 0; dead_letters := 0; sandbox_sends := 0;
        RETURN NEXT;
        RETURN;
    END IF;

    -- The audit keeps what was done, not to whom: the conversations' and
    -- their messages' ids go from its entries (ordo.redact_audit).
    PERFORM ordo.redact_audit(t.slug, array_agg(c.conversation_id))
    FROM ordo.conversations c JOIN ordo.tenants t ON t.id = c.tenant_id
    WHERE c.id = ANY (v_ids)
    GROUP BY t.slug;

    DELETE FROM ordo.sandbox_sends b USING ordo.steps s, ordo.messages m
    WHERE m.conversation_pk = ANY (v_ids) AND s.message_pk = m.id AND s.provider_message_id = b.wamid;
    GET DIAGNOSTICS sandbox_sends = ROW_COUNT;
    DELETE FROM ordo.dead_letters d USING ordo.messages m
    WHERE m.conversation_pk = ANY (v_ids) AND d.message_pk = m.id;
    GET DIAGNOSTICS dead_letters = ROW_COUNT;
    DELETE FROM ordo.steps s USING ordo.messages m
    WHERE m.conversation_pk = ANY (v_ids) AND s.message_pk = m.id;
    GET DIAGNOSTICS steps = ROW_COUNT;
    DELETE FROM ordo.messages m WHERE m.conversation_pk = ANY (v_ids);
    GET DIAGNOSTICS messages = ROW_COUNT;
    DELETE FROM ordo.conversations c WHERE c.id = ANY (v_ids);
    RETURN NEXT;
END;
$$;
