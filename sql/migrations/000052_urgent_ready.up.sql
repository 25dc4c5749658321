-- A conversation a user waits on (ordo.ready.urgent): its last message in
-- is the user's, or answers the user's. ordo.enqueue_message sets it when
-- it puts such a message in (ordo.make_ready) and it stays until the
-- conversation leaves the ready set (caught up). A tenant's claims take its
-- urgent due conversations first (ordo.claim), and their paced sends skip
-- the number's line (ordo.reserve_send): a user who wrote in the middle of
-- the tenant's own campaign waited for the campaign (issue 23's notes: a
-- line of 40 conversations at 10/s made the answer 4.1 s late).
--
-- The partial index holds only the urgent rows: a claim's probe of it is
-- one lookup, and the ready set's other writes do not touch it.
ALTER TABLE ordo.ready ADD COLUMN urgent boolean NOT NULL DEFAULT false;
CREATE INDEX ready_urgent_idx ON ordo.ready (tenant_id, due_at) WHERE urgent;
