-- ordo.resolve_dead_letter replays or skips dead letter p_id (p_resolution
-- 'replayed' or 'skipped') of tenant p_tenant (0: any tenant): the
-- operator's transitions of a conversation out of a dead letter
-- (sql/LIFECYCLE.md). It returns the dead letter's tenant slug,
-- conversation and message ids (for the audit entry the caller adds in the
-- same transaction), or no row when the dead letter is not the tenant's,
-- unknown, or already resolved.
--
--   * replay at the head of a halted conversation: the message runs again
--     in place (its failed steps pending, the conversation un-halted, the
--     fence bumped so no drain from before writes again);
--   * replay of a message the conversation has passed (the skip policy): it
--     goes to the conversation's tail with a new seq, as ingest would, under
--     the same row lock — a drain running meanwhile goes on and finds it
--     there, so the fence is left alone (bumping it would reject a busy
--     drain's record of a send it made);
--   * skip at the head: the message is skipped, the head moves past it, the
--     conversation is un-halted, the fence bumped;
--   * skip of a passed message: only its status.
-- A replayed send step that never had an attempt (attempts 0: its drain's
-- schema check refused it, jobs/check.go) goes back to 'unchecked', so it
-- is checked again rather than sent as it is.
-- Then the dead letter is resolved and the conversation put in the ready set
-- when it has work (ordo.ensure_drain).
--
-- Locks (sql/LOCKING.md): the conversation FOR UPDATE (no drain, current or
-- stale, writes while its head moves, and two resolutions of its dead
-- letters queue there: the second reads the first's), then steps, the
-- message, the dead letter, the ready row.
CREATE OR REPLACE FUNCTION ordo.resolve_dead_letter(p_id bigint, p_tenant bigint, p_resolution text)
RETURNS TABLE (slug text, conversation_id text, message_id text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_conv bigint;
    v_d    record;
BEGIN
    SELECT m.conversation_pk INTO v_conv FROM ordo.dead_letters d JOIN ordo.messages m ON m.id = d.message_pk
    WHERE d.id = p_id AND (p_tenant = 0 OR d.tenant_id = p_tenant);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM ordo.conversations c WHERE c.id = v_conv FOR UPDATE;
    SELECT d.message_pk, m.seq, c.head_seq, c.halted_at IS NOT NULL AS halted, t.slug, c.conversation_id, m.message_id
    INTO v_d
    FROM ordo.dead_letters d
    JOIN ordo.messages m ON m.id = d.message_pk
    JOIN ordo.conversations c ON c.id = m.conversation_pk
    JOIN ordo.tenants t ON t.id = d.tenant_id
    WHERE d.id = p_id AND (p_tenant = 0 OR d.tenant_id = p_tenant) AND d.resolved_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_resolution = 'replayed' AND v_d.halted AND v_d.seq = v_d.head_seq + 1 THEN
        UPDATE ordo.steps s SET status = CASE WHEN s.kind = 'send' AND s.attempts = 0 THEN 'unchecked' ELSE 'pending' END, attempts = 0, finished_at = NULL
        WHERE s.message_pk = v_d.message_pk AND s.status = 'failed';
        UPDATE ordo.messages m SET status = 'queued', finished_at = NULL WHERE m.id = v_d.message_pk;
        UPDATE ordo.conversations c SET halted_at = NULL, fence = c.fence + 1 WHERE c.id = v_conv;
    ELSIF p_resolution = 'replayed' THEN
        UPDATE ordo.conversations c SET last_seq = c.last_seq + 1 WHERE c.id = v_conv;
        UPDATE ordo.steps s SET status = CASE WHEN s.kind = 'send' AND s.attempts = 0 THEN 'unchecked' ELSE 'pending' END, attempts = 0, finished_at = NULL
        WHERE s.message_pk = v_d.message_pk AND s.status = 'failed';
        UPDATE ordo.messages m SET status = 'queued', finished_at = NULL,
            seq = (SELECT c.last_seq FROM ordo.conversations c WHERE c.id = v_conv)
        WHERE m.id = v_d.message_pk;
    ELSIF v_d.halted AND v_d.seq = v_d.head_seq + 1 THEN
        UPDATE ordo.messages m SET status = 'skipped', finished_at = now() WHERE m.id = v_d.message_pk;
        UPDATE ordo.conversations c SET halted_at = NULL, head_seq = v_d.seq, fence = c.fence + 1 WHERE c.id = v_conv;
    ELSE
        UPDATE ordo.messages m SET status = 'skipped' WHERE m.id = v_d.message_pk;
    END IF;
    UPDATE ordo.dead_letters d SET resolved_at = now(), resolution = p_resolution WHERE d.id = p_id;
    PERFORM ordo.ensure_drain(v_conv);
    RETURN QUERY SELECT v_d.slug, v_d.conversation_id, v_d.message_id;
END;
$$;
