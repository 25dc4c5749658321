-- ordo.redact_audit erases the conversation and message ids of tenant's
-- audit entries about the given conversations (by their conversation_id),
-- keeping the fact of each action (who, what, which tenant, when, the dead
-- letter's number) and marking it {"redacted": true}; it returns how many
-- entries it redacted. `ordo purge --all` calls it (ordo.purge_conversations)
-- for the conversations it deletes: a right-to-erasure request leaves no id
-- of the end user behind. It is the one UPDATE ordo.audit_log_guard lets
-- through, and says so for the span of its own statement (ordo.audit_write,
-- transaction-local, reset before it returns).
CREATE OR REPLACE FUNCTION ordo.redact_audit(tenant text, conversations text[])
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    PERFORM set_config('ordo.audit_write', 'redact', true);
    UPDATE ordo.audit_log a
    SET conversation_id = NULL, message_id = NULL,
        details = (a.details - 'conversation_id' - 'message_id') || '{"redacted": true}'
    WHERE a.tenant = redact_audit.tenant AND a.conversation_id = ANY (conversations);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM set_config('ordo.audit_write', '', true);
    RETURN v_n;
END;
$$;
