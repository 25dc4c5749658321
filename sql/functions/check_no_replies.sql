-- ordo.check_no_replies guards a drain's write that gives up waiting for an
-- async handler's replies (the reply deadline passed): it locks handle step
-- p_step and raises ORR01, rolling the write back, when replies were posted
-- meanwhile (ordo.post_replies), so that replies the API accepted are sent,
-- never dropped by a dead letter racing them. The caller runs it after
-- ordo.check_fence (the conversation row), as ordo.post_replies locks the
-- conversation row before the step: sql/LOCKING.md.
CREATE OR REPLACE FUNCTION ordo.check_no_replies(p_step bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ordo.steps s WHERE s.id = p_step AND s.replies IS NOT NULL FOR UPDATE;
    IF FOUND THEN
        RAISE EXCEPTION 'replies were posted for step %', p_step USING ERRCODE = 'ORR01';
    END IF;
END;
$$;
