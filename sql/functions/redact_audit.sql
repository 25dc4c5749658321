-- ordo.redact_audit erases the conversation and message ids of tenant's
-- audit entries about the given conversations (by their conversation_id),
-- keeping the fact of each action (who, what, which tenant, when, the dead
-- letter's number) and marking it {"redacted": true}; it returns how many
-- entries it redacted. `ordo purge --all` calls it (ordo.purge_conversations)
-- for the conversations it deletes: a right-to-erasure request leaves no id
-- of the end user behind. It is the one UPDATE ordo.audit_log_guard lets
-- through (it finds this function on the call stack, named with its
-- schema: hence its fixed search_path).
CREATE OR REPLACE FUNCTION ordo.redact_audit(tenant text, conversations text[])
RETURNS int
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_n int;
BEGIN
    UPDATE ordo.audit_log a
    SET conversation_id = NULL, message_id = NULL,
        details = (a.details - 'conversation_id' - 'message_id') || '{"redacted": true}'
    WHERE a.tenant = redact_audit.tenant AND a.conversation_id = ANY (conversations);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
