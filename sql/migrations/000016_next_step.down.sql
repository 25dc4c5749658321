DROP FUNCTION ordo.next_step(bigint, bigint, bigint, bigint, text);
