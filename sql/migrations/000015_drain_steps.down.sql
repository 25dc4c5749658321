DROP FUNCTION ordo.finish_step(bigint, bigint, int, bigint, text, bigint, bigint, boolean, jsonb, interval);
DROP FUNCTION ordo.start_step(bigint, bigint, bigint, bigint, int, text, jsonb, text);
