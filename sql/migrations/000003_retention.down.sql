DROP INDEX IF EXISTS ordo.messages_unpruned_idx;
UPDATE ordo.messages SET payload = '{}' WHERE payload IS NULL;
ALTER TABLE ordo.messages ALTER COLUMN payload SET NOT NULL;
ALTER TABLE ordo.tenants DROP COLUMN IF EXISTS retention;
