-- The counters' trigger functions live in sql/functions; without their table
-- they would break every ingest, so they go first (and are re-applied by
-- the next sql.Up, their checksums forgotten).
DROP TRIGGER IF EXISTS stats_on_message ON ordo.messages;
DROP TRIGGER IF EXISTS stats_on_step ON ordo.steps;
DROP FUNCTION IF EXISTS ordo.stats_on_message();
DROP FUNCTION IF EXISTS ordo.stats_on_step();
DO $$
BEGIN
    IF to_regclass('ordo.function_checksums') IS NOT NULL THEN
        DELETE FROM ordo.function_checksums WHERE name IN ('stats_on_message', 'stats_on_step');
    END IF;
END;
$$;
DROP TABLE ordo.stats_minutes;
DROP INDEX ordo.messages_message_id_prefix_idx;
DROP INDEX ordo.conversations_halted_idx;
DROP TABLE ordo.operator_sessions;
DROP TABLE ordo.operators;
