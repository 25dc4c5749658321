package jobs_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ordo-dev/ordo/engine"
	"github.com/ordo-dev/ordo/jobs"
	"github.com/ordo-dev/ordo/jobs/jobstest"
	"github.com/ordo-dev/ordo/tenants"
)

// retentionFixture is a tenant's history written by hand (no workers run),
// each conversation in a state the pruner must treat its own way. Times are
// days ago; the default retention is 30 days.
type retentionFixture struct {
	t   *testing.T
	b   *jobstest.Bundle
	ids map[string]int64 // message_id → messages.id
}

func setupRetention(t *testing.T) *retentionFixture {
	t.Helper()
	// The tests run the pruner themselves: no periodic pruning beside them.
	b := jobstest.Setup(t, jobstest.Options{NoStart: true, Config: jobs.Config{PruneInterval: -1}})
	f := &retentionFixture{t: t, b: b, ids: map[string]int64{}}
	ingest := func(conv, id string) {
		a := b.Ingest(conv, id, "hello "+id)
		var pk int64
		if err := b.Pool.QueryRow(context.Background(), `SELECT id FROM ordo.messages WHERE message_id = $1`, id).Scan(&pk); err != nil {
			t.Fatal(err)
		}
		f.ids[id] = pk
		_ = a
	}
	// old: two messages done 40 days ago, one with a resolved dead letter.
	ingest("old", "old-1")
	ingest("old", "old-2")
	// dead: skipped past (head moved on) but its dead letter is still open.
	ingest("dead", "dead-1")
	// halted: one done message, then a dead one the conversation halts on,
	// then one waiting behind it.
	ingest("halted", "halted-1")
	ingest("halted", "halted-2")
	ingest("halted", "halted-3")
	// recent: done a day ago, inside the retention.
	ingest("recent", "recent-1")
	f.exec(`DELETE FROM ordo.ready`)
	f.exec(`UPDATE ordo.messages SET created_at = now() - interval '41 days'`)
	f.exec(`UPDATE ordo.messages SET created_at = now() - interval '2 days' WHERE message_id = 'recent-1'`)
	f.exec(`UPDATE ordo.messages SET status = 'done', finished_at = created_at + interval '1 day'
	        WHERE message_id IN ('old-1', 'old-2', 'halted-1', 'recent-1')`)
	f.exec(`UPDATE ordo.messages SET status = 'dead', finished_at = created_at + interval '1 day'
	        WHERE message_id IN ('dead-1', 'halted-2')`)
	f.exec(`UPDATE ordo.conversations SET head_seq = last_seq WHERE conversation_id IN ('old', 'dead', 'recent')`)
	f.exec(`UPDATE ordo.conversations SET head_seq = 1, halted_at = now() - interval '39 days' WHERE conversation_id = 'halted'`)
	// Every message has a send step with an error and a provider status.
	f.exec(`INSERT INTO ordo.steps (message_pk, idx, kind, status, request, attempts, errors, provider_message_id, provider_status)
	        SELECT id, 0, 'send', 'done', payload, 2, '[{"attempt":1,"error":"timeout"}]', 'wamid.' || message_id, 'read'
	        FROM ordo.messages`)
	f.exec(`INSERT INTO ordo.dead_letters (tenant_id, message_pk, reason, resolved_at, resolution)
	        SELECT tenant_id, id, 'failed', now() - interval '40 days', 'replayed' FROM ordo.messages WHERE message_id = 'old-2'`)
	f.exec(`INSERT INTO ordo.dead_letters (tenant_id, message_pk, reason)
	        SELECT tenant_id, id, 'failed' FROM ordo.messages WHERE message_id IN ('dead-1', 'halted-2')`)
	f.exec(`INSERT INTO ordo.sandbox_sends (phone_number_id, wamid, body) VALUES ('1', 'wamid.old-1', '{}'), ('1', 'wamid.recent-1', '{}')`)
	return f
}

func (f *retentionFixture) exec(sql string) {
	if _, err := f.b.Pool.Exec(context.Background(), sql); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

func (f *retentionFixture) pruned(id string) bool {
	return f.b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1 AND payload IS NULL`, id) == 1
}

func (f *retentionFixture) steps(id string) int {
	return f.b.Count(`SELECT count(*) FROM ordo.steps s JOIN ordo.messages m ON m.id = s.message_pk WHERE m.message_id = $1`, id)
}

// After the retention a finished message keeps only its dedupe record: a
// repeat months later is still a duplicate with the original's seq, and its
// view shows the status and no content. Open dead letters, a halted
// conversation's dead message and what waits behind it, and messages inside
// the retention keep everything.
func TestPruneRemovesContentAfterRetentionAndKeepsDedupe(t *testing.T) {
	t.Parallel()
	f := setupRetention(t)
	b, ctx := f.b, context.Background()

	got, err := jobs.NewPruner(b.Pool, 1, nil).Once(ctx) // batch of 1: the loop goes on
	if err != nil {
		t.Fatal(err)
	}
	want := jobs.PruneCounts{Messages: 3, Steps: 3, DeadLetters: 1, SandboxSends: 1}
	if got != want {
		t.Fatalf("pruned %+v, want %+v", got, want)
	}
	for id, wantPruned := range map[string]bool{
		"old-1": true, "old-2": true, "halted-1": true,
		"dead-1": false, "halted-2": false, "halted-3": false, "recent-1": false,
	} {
		if p := f.pruned(id); p != wantPruned {
			t.Errorf("%s: pruned = %v, want %v", id, p, wantPruned)
		}
		if n := f.steps(id); (n == 0) != wantPruned {
			t.Errorf("%s: %d steps left, pruned = %v", id, n, wantPruned)
		}
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters WHERE resolved_at IS NULL`); n != 2 {
		t.Errorf("open dead letters = %d, want 2 (untouched)", n)
	}

	a := b.Ingest("old", "old-2", "hello old-2")
	if !a.Duplicate || a.Seq != 2 || a.Status != "done" || a.ConversationID != "old" {
		t.Errorf("repeat of a pruned message = %+v, want duplicate of seq 2, done, in old", a)
	}
	m, err := b.Engine.Message(ctx, b.Tenant.ID, "old-2")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Pruned || m.Status != "done" || m.Seq != 2 || len(m.Steps) != 0 || m.Payload != nil {
		t.Errorf("view of a pruned message = %+v, want pruned, done, seq 2, no steps, no payload", m)
	}

	// A second pass finds nothing more.
	if again, err := jobs.NewPruner(b.Pool, 0, nil).Once(ctx); err != nil || again != (jobs.PruneCounts{}) {
		t.Errorf("second pass pruned %+v (%v), want nothing", again, err)
	}
}

// Retention 0 keeps everything for ever.
func TestPruneKeepsEverythingWithRetentionZero(t *testing.T) {
	t.Parallel()
	f := setupRetention(t)
	b, ctx := f.b, context.Background()
	zero := tenants.Retention(0)
	tn, err := b.Tenants.Update(ctx, b.Tenant.Slug, tenants.UpdateParams{Retention: &zero})
	if err != nil || tn.Retention != 0 {
		t.Fatalf("set retention 0: %v, %v", tn.Retention, err)
	}
	if got, err := jobs.NewPruner(b.Pool, 0, nil).Once(ctx); err != nil || got != (jobs.PruneCounts{}) {
		t.Fatalf("pruned %+v (%v) with retention 0, want nothing", got, err)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE payload IS NULL`); n != 0 {
		t.Errorf("%d messages lost their content", n)
	}
}

// The pruner waits on no lock a drain or an ingest holds: with one
// conversation row and one prunable message locked by another transaction
// (as a drain's write or an ingest would), it finishes at once, passes the
// locked message over and prunes the rest.
func TestPrunerWaitsOnNoDrainOrIngestLock(t *testing.T) {
	t.Parallel()
	f := setupRetention(t)
	b := f.b
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := b.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ordo.conversations WHERE conversation_id IN ('old', 'halted') FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ordo.messages WHERE message_id = 'old-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := jobs.NewPruner(b.Pool, 0, nil).Once(ctx)
	if err != nil {
		t.Fatalf("prune with rows locked: %v after %s", err, time.Since(start))
	}
	if got.Messages != 2 || f.pruned("old-1") || !f.pruned("old-2") || !f.pruned("halted-1") {
		t.Errorf("pruned %+v; want old-2 and halted-1, old-1 (locked) passed over", got)
	}
	// An ingest into the pruned conversation is not held up by the pruner
	// either (the lock it waits on here is the test's, released now).
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if a := b.Ingest("old", "old-3", "x"); a.Duplicate || a.Seq != 3 {
		t.Errorf("ingest after prune = %+v, want new seq 3", a)
	}
}

// A purge without --all is retention with the cutoff now: finished content
// goes, dedupe records stay, unfinished work and open dead letters are kept
// and counted. With --all whole conversations go — open dead letters and
// work in flight included — and a repeat is accepted as new.
func TestPurge(t *testing.T) {
	t.Parallel()
	f := setupRetention(t)
	b, ctx := f.b, context.Background()

	got, err := b.Engine.Purge(ctx, b.Tenant.Slug, time.Now(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got.ContentRemoved != 4 || got.Conversations != 0 || got.DedupeRecords != 0 ||
		got.KeptUnfinished != 1 || got.KeptOpenDeadLetters != 2 {
		t.Errorf("purge = %+v; want content of 4 (old-1, old-2, halted-1, recent-1) removed, 1 unfinished and 2 open dead letters kept", got)
	}
	if !f.pruned("recent-1") || f.pruned("halted-3") || f.pruned("dead-1") {
		t.Error("purge: recent-1 should be pruned, halted-3 and dead-1 kept")
	}
	if a := b.Ingest("recent", "recent-1", "hello recent-1"); !a.Duplicate || a.Seq != 1 {
		t.Errorf("repeat after purge = %+v, want duplicate seq 1", a)
	}

	// A message accepted after the cutoff keeps its conversation.
	cutoff := time.Now()
	b.Ingest("recent", "recent-2", "later")
	got, err = b.Engine.Purge(ctx, b.Tenant.Slug, cutoff, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Conversations != 3 || got.DedupeRecords != 6 || got.KeptUnfinished != 0 || got.KeptOpenDeadLetters != 0 {
		t.Errorf("purge --all = %+v; want old, dead, halted deleted (6 messages), recent kept", got)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.dead_letters`); n != 0 {
		t.Errorf("%d dead letters left after --all", n)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'recent-%'`); n != 2 {
		t.Errorf("recent conversation has %d messages, want 2 kept", n)
	}
	if a := b.Ingest("old", "old-1", "hello old-1"); a.Duplicate || a.Seq != 1 {
		t.Errorf("repeat after purge --all = %+v, want accepted as new, seq 1", a)
	}
	if _, err := b.Engine.Purge(ctx, "nobody", time.Now(), false); engine.ErrorCode(err) != engine.CodeNotFound {
		t.Errorf("purge of an unknown tenant: %v, want not found", err)
	}
}

// With the workers running, pruning a large old conversation and draining
// a live one go on side by side: the live messages are sent in order while
// the pruner works through its batches, and both finish.
func TestPrunerAndDrainBothProgress(t *testing.T) {
	t.Parallel()
	f := setupRetention(t)
	b, ctx := f.b, context.Background()
	// 5,000 more finished old messages in "old", pruned 100 at a time. Ids
	// grow with time (the pruner stops at the first recent one), so the
	// recent message goes first.
	f.exec(`DELETE FROM ordo.messages WHERE message_id = 'recent-1'`)
	f.exec(`WITH c AS (UPDATE ordo.conversations SET last_seq = last_seq + 5000, head_seq = head_seq + 5000
	                   WHERE conversation_id = 'old' RETURNING id, tenant_id, head_seq)
	        INSERT INTO ordo.messages (tenant_id, conversation_pk, message_id, seq, direction, payload, status, created_at, finished_at)
	        SELECT c.tenant_id, c.id, 'bulk-' || g, c.head_seq - 5000 + g, 'outbound', '{"to":"1","type":"text","text":{"body":"x"}}',
	               'done', now() - interval '40 days', now() - interval '40 days'
	        FROM c, generate_series(1, 5000) g`)
	b.Start()
	done := make(chan jobs.PruneCounts, 1)
	go func() {
		n, err := jobs.NewPruner(b.Pool, 100, nil).Once(ctx)
		if err != nil {
			t.Errorf("prune: %v", err)
		}
		done <- n
	}()
	for i := range 20 {
		b.Ingest("live", "live-"+strconv.Itoa(i), "hi")
	}
	b.WaitFor("the live conversation drained", 30*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'live-%' AND status = 'done'`) == 20
	})
	if n := <-done; n.Messages != 5003 {
		t.Errorf("pruned %d messages, want 5003", n.Messages)
	}
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'live-%' AND payload IS NULL`); n != 0 {
		t.Errorf("%d live messages pruned inside the retention", n)
	}
}

// purge --all while a conversation's drain is at work: the drain is fenced
// (its next write finds no conversation) and writes nothing back; the
// conversation and everything in it is gone, and the workers go on with
// others.
func TestPurgeAllFencesADrainInFlight(t *testing.T) {
	t.Parallel()
	b := jobstest.Setup(t, jobstest.Options{})
	ctx := context.Background()
	for i := range 200 {
		b.Ingest("busy", "busy-"+strconv.Itoa(i), "hi")
	}
	b.WaitFor("the drain started", 10*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE status = 'done'`) > 0
	})
	got, err := b.Engine.Purge(ctx, b.Tenant.Slug, time.Now(), true)
	if err != nil {
		t.Fatal(err)
	}
	if got.Conversations != 1 || got.DedupeRecords != 200 {
		t.Errorf("purge --all = %+v, want 1 conversation and its 200 messages", got)
	}
	b.Ingest("other", "other-1", "hi")
	b.WaitFor("another conversation drained", 20*time.Second, func() bool {
		return b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'other-1' AND status = 'done'`) == 1
	})
	if n := b.Count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'busy-%'`) +
		b.Count(`SELECT count(*) FROM ordo.conversations WHERE conversation_id = 'busy'`); n != 0 {
		t.Errorf("%d rows of the purged conversation came back", n)
	}
}
