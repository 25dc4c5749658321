-- ordo.audit_retention_min is the youngest an audit entry can be and still
-- be pruned (ordo.audit_log_guard, ordo.prune_audit): 90 days, whatever a
-- caller asks.
CREATE OR REPLACE FUNCTION ordo.audit_retention_min()
RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT interval '90 days'
$$;
