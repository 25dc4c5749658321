-- ordo.check_reuse is enqueue_message's answer to a repeat of message
-- message_pk: nothing when the offered body's hash (offered) is the stored
-- one, SQLSTATE ORM01 (sql.SQLStateMessageIDReused) when it differs and
-- on_reuse is 'error'. A message with no stored hash (accepted before
-- migration 000010) is compared with the hash of its payload while it still
-- has one; once pruned it cannot be compared and counts as the same.
CREATE OR REPLACE FUNCTION ordo.check_reuse(message_pk bigint, stored bytea, offered bytea, on_reuse text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF on_reuse <> 'error' THEN
        RETURN;
    END IF;
    IF stored IS NULL THEN
        SELECT ordo.message_body_hash(c.conversation_id, m.direction, m.payload) INTO stored
        FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
        WHERE m.id = message_pk AND m.payload IS NOT NULL;
    END IF;
    IF stored IS NOT NULL AND stored <> offered THEN
        RAISE EXCEPTION 'message_id: already used for a message with another body (a repeat must carry the same conversation_id, direction and content)'
            USING ERRCODE = 'ORM01';
    END IF;
END;
$$;
