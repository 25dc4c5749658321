-- ordo.claim_conversation claims, for the calling session, the conversation
-- of tenant p_tenant that has been due the longest (ordo.ready), and returns
-- it with the concurrency slot it took. A worker's scheduler calls it for the
-- tenant whose turn it is (jobs/scheduler.go); the takeover follows in the
-- same transaction and reads the claimed conversation from the
-- transaction-local setting ordo.claimed.
--
-- The claim is the conversation's session advisory lock (first key p_lock,
-- the drain's lock namespace), tried — never waited for — on each of the
-- tenant's first due conversations in turn; one another drain holds (it is
-- being claimed right now, or its drain runs past its due time) is passed
-- over. No row lock is taken here: the takeover updates the ready row after
-- it locked the conversation row, in the lock order of sql/LOCKING.md.
--
-- p_cap > 0 caps the tenant's drains at once across every process: a drain
-- holds one of p_cap slot locks (two-key advisory locks (-1 - slot, tenant))
-- for as long as it runs; with none free the claim returns nothing. The
-- caller releases the slot when the drain is over (p_release_slot of its next
-- claim, or pg_advisory_unlock). p_lease_ms becomes the session's
-- idle_session_timeout (the drain's lease) when a conversation is claimed.
-- more says whether another of the tenant's conversations was due behind
-- the claimed one: the scheduler then wakes one more runner. After
-- ordo.claim_batch claimed a batch in the same transaction (ordo.batch =
-- 'y'), it only releases p_release_slot.
CREATE OR REPLACE FUNCTION ordo.claim_conversation(
    p_lock int, p_tenant bigint, p_cap int, p_lease_ms int, p_release_tenant bigint, p_release_slot int)
RETURNS TABLE (conv bigint, slot int, more boolean)
LANGUAGE plpgsql
-- Walk ready_tenant_due_idx in due order and stop at the first conversation
-- claimed, whatever the planner's statistics say. Without statistics (a new
-- database, or a ready set that grew from a few rows to a campaign's since
-- the last ANALYZE) Postgres estimated a handful of due rows and chose to
-- fetch every due row of the tenant and sort them: a claim's cost then grew
-- with the tenant's backlog (issue 11, `make bench` spread: 0.34 ms per
-- claim; with this, 0.03 ms).
SET enable_sort = off
AS $$
DECLARE
    v_slot  int;
    v_start int;
    v_conv  bigint;
BEGIN
    PERFORM set_config('ordo.claimed', '', true);
    IF p_release_slot IS NOT NULL THEN
        PERFORM pg_advisory_unlock(-1 - p_release_slot, p_release_tenant::int);
    END IF;
    IF p_tenant IS NULL OR current_setting('ordo.batch', true) = 'y' THEN
        RETURN; -- nothing to claim, or ordo.claim_batch claimed a batch before this
    END IF;
    IF p_cap > 0 THEN
        v_start := floor(random() * p_cap)::int;
        FOR k IN 0 .. p_cap - 1 LOOP
            IF pg_try_advisory_lock(-1 - (v_start + k) % p_cap, p_tenant::int) THEN
                v_slot := (v_start + k) % p_cap;
                EXIT;
            END IF;
        END LOOP;
        IF v_slot IS NULL THEN
            RETURN;
        END IF;
    END IF;
    FOR v_conv IN
        SELECT r.conversation_pk FROM ordo.ready r
        WHERE r.tenant_id = p_tenant AND r.due_at <= now()
        ORDER BY r.due_at LIMIT 16
    LOOP
        IF conv IS NOT NULL THEN
            -- The row after the claimed one: already fetched with it.
            more := true;
            EXIT;
        END IF;
        IF pg_try_advisory_lock(p_lock, (v_conv % 2147483647)::int) THEN
            PERFORM set_config('ordo.claimed', v_conv::text, true),
                    set_config('idle_session_timeout', p_lease_ms::text, false);
            conv := v_conv;
            slot := v_slot;
            more := false;
        END IF;
    END LOOP;
    IF conv IS NOT NULL THEN
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_slot IS NOT NULL THEN
        PERFORM pg_advisory_unlock(-1 - v_slot, p_tenant::int);
    END IF;
END;
$$;
