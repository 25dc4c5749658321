-- ordo.check_fence starts every write batch of a drain. It holds a KEY SHARE
-- lock on the conversation to commit, so a takeover (which bumps the fence
-- under FOR UPDATE) waits for the write, and raises ORF01 when the token is
-- stale so the whole batch rolls back.
CREATE OR REPLACE FUNCTION ordo.check_fence(conv bigint, token bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ordo.conversations c WHERE c.id = conv AND c.fence = token FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', token, conv USING ERRCODE = 'ORF01';
    END IF;
END;
$$;
