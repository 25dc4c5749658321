-- ordo.check_api_key raises SQLSTATE 28000 (invalid_authorization_specification)
-- unless p_hash is the SHA-256 of an API key that is not revoked. The REST
-- API's message ingest runs it in the transaction that stores the message
-- when it did not look the key up for the request (a key that authenticated
-- a few seconds ago, web.KeyReuseDefault): a key revoked since is refused
-- there, and nothing of its message is stored.
CREATE OR REPLACE FUNCTION ordo.check_api_key(p_hash bytea) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM ordo.api_keys k WHERE k.hash = p_hash AND k.revoked_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'API key unknown or revoked' USING ERRCODE = '28000';
    END IF;
END;
$$;
