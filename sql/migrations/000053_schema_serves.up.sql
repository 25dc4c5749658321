-- The oldest build the schema still serves (sql.OldestServed, written by
-- sql.Up after every migration): during a rolling deploy the processes of
-- the build before go on after `ordo migrate up`, and stay ready, while
-- this says the schema still serves them (sql.CheckMigrated).
CREATE TABLE ordo.schema_serves (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    oldest int NOT NULL
);
