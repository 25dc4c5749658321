-- Let the conversation row's frequent updates be HOT (no new index entries):
-- seq (ingest), head (every finished message) and fence (takeover) change
-- many times per message, and conversations_orphan_idx's predicate names
-- last_seq and head_seq, which made each of those updates write a new entry
-- into every index of the table. The reconciler looks for orphans (work but
-- no drain: only a bug or an operator's hand makes one) with a scan instead,
-- every OrphanInterval (jobs.Config), not every ReconcileInterval. Free space
-- on each page keeps the updated row version on its page (a HOT condition).
DROP INDEX ordo.conversations_orphan_idx;
ALTER TABLE ordo.conversations SET (fillfactor = 70);
