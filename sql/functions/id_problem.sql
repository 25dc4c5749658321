-- ordo.id_problem is ordo's one rule for an id (message_id,
-- conversation_id): NULL when id is valid, else what is wrong with it, in
-- the contract's words and without the field's name. An id is 1 to 256
-- characters; none is a control character (U+0001-U+001F, U+007F-U+009F;
-- text cannot hold U+0000) or a line or paragraph separator (U+2028,
-- U+2029); the first and the last are not a space (the Unicode White_Space
-- characters that are not controls: U+0020, U+00A0, U+1680,
-- U+2000-U+200A, U+202F, U+205F, U+3000). Invalid UTF-8 never reaches it:
-- Postgres refuses the bytes first (SQLSTATE 22021).
--
-- ordo.enqueue_message raises it as SQLSTATE 22023 "field: problem",
-- whoever calls (REST, webhooks, other applications' SQL). Go's
-- whatsapp.CheckID (jobs/whatsapp/text.go) is the same predicate with the
-- same words, so REST and the webhook answer 400 before a transaction;
-- web/ids_test.go holds both to one table and to every character of the
-- Basic Multilingual Plane.
--
-- A plain SQL function of immutable calls, inlined where it is called: a
-- valid id costs its length and one regular expression.
CREATE OR REPLACE FUNCTION ordo.id_problem(id text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN $1 IS NULL OR $1 = '' THEN 'required'
        WHEN length($1) > 256 THEN 'must be 1 to 256 printable characters, not ' || length($1)::text
        WHEN $1 ~ '^[^\u0001-\u001f\u007f-\u009f\u2028\u2029\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]([^\u0001-\u001f\u007f-\u009f\u2028\u2029]*[^\u0001-\u001f\u007f-\u009f\u2028\u2029\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000])?$' THEN NULL
        WHEN $1 ~ '[\u0001-\u001f\u007f-\u009f\u2028\u2029]' THEN
            'must be 1 to 256 printable characters, without control characters or line separators: U+'
            || upper(lpad(to_hex(ascii(substring($1 FROM '[\u0001-\u001f\u007f-\u009f\u2028\u2029]'))), 4, '0'))
            || ' at character ' || strpos($1, substring($1 FROM '[\u0001-\u001f\u007f-\u009f\u2028\u2029]'))::text
        WHEN $1 ~ '^[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]' THEN
            'must be 1 to 256 printable characters, without a space at either end: U+'
            || upper(lpad(to_hex(ascii($1)), 4, '0')) || ' at character 1'
        ELSE
            'must be 1 to 256 printable characters, without a space at either end: U+'
            || upper(lpad(to_hex(ascii(right($1, 1))), 4, '0')) || ' at character ' || length($1)::text
    END
$$;
