ALTER TABLE ordo.send_pacing DROP COLUMN sent_until;
