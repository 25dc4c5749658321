ALTER TABLE ordo.conversations DROP COLUMN paused_wait;
