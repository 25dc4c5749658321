-- The schema everything of ordo lives in, River's tables included, so ordo
-- can share a database with an application that runs its own River.
CREATE SCHEMA IF NOT EXISTS ordo;
