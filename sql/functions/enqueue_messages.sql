-- ordo.enqueue_messages is ordo.enqueue_message for several messages of one
-- conversation, in their order, in the caller's transaction: one row back
-- per message, in the same order. The REST group commit (engine/batch.go)
-- calls it once per conversation of a batch, so that a batch holding some
-- conversations never waits for another (sql/LOCKING.md):
--
-- p_wait => true waits for the conversation's row as enqueue_message does:
-- the batch's first conversation, taken before it holds any.
--
-- p_wait => false only tries the row (FOR NO KEY UPDATE SKIP LOCKED, the
-- mode of enqueue_message's upsert, so no upgrade follows). When another
-- transaction holds it (an application's import, a drain, another batch)
-- it returns no row and stores nothing: the caller answers those messages
-- otherwise (the batch: one at a time, each in a transaction holding
-- nothing else). A conversation whose row is not there yet is inserted by
-- enqueue_message; the one wait left there is for another transaction that
-- is inserting the same new conversation at that moment, bounded by the
-- caller's lock_timeout (Postgres has no NOWAIT for a unique check; a
-- transaction advisory lock marking each insert would cost an
-- application's import one lock-table slot per new conversation).
CREATE OR REPLACE FUNCTION ordo.enqueue_messages(
    tenant_slug     text,
    conversation_id text,
    message_ids     text[],
    directions      text[],
    payloads        jsonb[],
    on_reuse        text[],
    p_wait          boolean,
    checked         boolean DEFAULT false
) RETURNS TABLE (id bigint, seq bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_wait THEN
        PERFORM 1 FROM ordo.conversations c JOIN ordo.tenants t ON t.id = c.tenant_id
        WHERE t.slug = enqueue_messages.tenant_slug AND c.conversation_id = enqueue_messages.conversation_id
        FOR NO KEY UPDATE OF c SKIP LOCKED;
        IF NOT FOUND AND EXISTS (
            SELECT 1 FROM ordo.conversations c JOIN ordo.tenants t ON t.id = c.tenant_id
            WHERE t.slug = enqueue_messages.tenant_slug AND c.conversation_id = enqueue_messages.conversation_id) THEN
            RETURN; -- held by another transaction: not waited for
        END IF;
    END IF;
    FOR i IN 1 .. coalesce(array_length(message_ids, 1), 0) LOOP
        RETURN QUERY
        SELECT e.id, e.seq, e.duplicate
        FROM ordo.enqueue_message(enqueue_messages.tenant_slug, enqueue_messages.conversation_id,
                                  message_ids[i], directions[i], payloads[i], on_reuse[i], checked) e;
    END LOOP;
END;
$$;
