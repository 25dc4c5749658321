DROP TABLE ordo.leases;
ALTER TABLE ordo.messages DROP COLUMN body_hash;
