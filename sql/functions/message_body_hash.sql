-- ordo.message_body_hash is what makes two offers of one message_id "the
-- same body": SHA-256 of the conversation, the direction and the payload as
-- jsonb text. jsonb's text is canonical (keys sorted and deduplicated, no
-- insignificant whitespace), so key order and spacing in the request do not
-- count; values do (1 and 1.0 are different bodies). A plain SQL function,
-- inlined where it is called: declared STABLE because convert_to and
-- jsonb_build_array are (Postgres never inlines a function declared
-- IMMUTABLE over STABLE calls, and ran it as a statement of its own per
-- accepted message).
CREATE OR REPLACE FUNCTION ordo.message_body_hash(conversation_id text, direction text, payload jsonb)
RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT sha256(convert_to(jsonb_build_array($1, $2, $3)::text, 'UTF8'))
$$;
