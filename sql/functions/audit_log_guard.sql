-- ordo.audit_log_guard keeps the audit log append-only: it refuses every
-- UPDATE, DELETE and TRUNCATE of ordo.audit_log but the two the audit
-- itself makes, each from its one function — read from the call stack
-- (PG_CONTEXT), not from a flag in the session that anyone could set:
--
-- * ordo.prune_audit: a DELETE of an entry older than
--   ordo.audit_retention_min() — never a recent one;
-- * ordo.redact_audit: an UPDATE that only
--   erases an entry's conversation and message ids (and those keys of its
--   details, marking it redacted), keeping who did what to which tenant and
--   when: `ordo purge --all`, a right-to-erasure request.
--
-- The table's owner can still drop the trigger (Postgres lets an owner do
-- anything): the guard is against the product's own code and a slip at a
-- psql prompt; the applications' roles (ordo tenant sql-role) reach no
-- table at all.
CREATE OR REPLACE FUNCTION ordo.audit_log_guard()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_stack text;
BEGIN
    GET DIAGNOSTICS v_stack = PG_CONTEXT;
    IF TG_OP = 'DELETE' AND v_stack LIKE '%function ordo.prune_audit(%' AND OLD.at < now() - ordo.audit_retention_min() THEN
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND v_stack LIKE '%function ordo.redact_audit(%'
       AND NEW.id = OLD.id AND NEW.at = OLD.at AND NEW.actor = OLD.actor AND NEW.action = OLD.action
       AND NEW.tenant IS NOT DISTINCT FROM OLD.tenant AND NEW.dead_letter_id IS NOT DISTINCT FROM OLD.dead_letter_id
       AND NEW.conversation_id IS NULL AND NEW.message_id IS NULL
       AND NEW.details <@ (OLD.details || '{"redacted": true}') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'ordo.audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'entries are removed only by ordo.prune_audit (older than the audit retention) and redacted only by ordo.redact_audit';
END;
$$;

CREATE OR REPLACE TRIGGER audit_log_guard BEFORE UPDATE OR DELETE ON ordo.audit_log
FOR EACH ROW EXECUTE FUNCTION ordo.audit_log_guard();

CREATE OR REPLACE TRIGGER audit_log_guard_truncate BEFORE TRUNCATE ON ordo.audit_log
FOR EACH STATEMENT EXECUTE FUNCTION ordo.audit_log_guard();
