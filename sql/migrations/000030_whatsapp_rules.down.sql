DROP TABLE IF EXISTS ordo.media;
DROP TABLE IF EXISTS ordo.usage;
ALTER TABLE ordo.messages DROP COLUMN IF EXISTS read_receipt;
ALTER TABLE ordo.tenants DROP COLUMN IF EXISTS mark_read;
ALTER TABLE ordo.conversations DROP COLUMN IF EXISTS last_inbound_at;
