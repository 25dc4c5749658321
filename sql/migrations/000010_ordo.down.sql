DROP FUNCTION IF EXISTS ordo.enqueue_message(text, text, text, text, jsonb);
DROP TABLE IF EXISTS ordo.sandbox_sends;
DROP TABLE IF EXISTS ordo.dead_letters;
DROP TABLE IF EXISTS ordo.steps;
DROP TABLE IF EXISTS ordo.messages;
DROP TABLE IF EXISTS ordo.conversations;
DROP TABLE IF EXISTS ordo.credentials;
DROP TABLE IF EXISTS ordo.api_keys;
DROP TABLE IF EXISTS ordo.tenants;
