package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A group commit holds a, c and d's REST messages while an application's
// transaction (an import, through ordo.enqueue_message) holds c and then
// asks for a. The batch used to take a, then wait up to its lock timeout
// for c: a lock cycle with the application until that timeout, in which
// any deadlock check — the application's own, or a third transaction's
// waiting on one of those rows — fails someone with "deadlock detected"
// (the wake's cycle, make chaos seed 1). Forced here: the application
// checks for deadlocks after 20 ms rather than a second, and asks for a
// once some ingest waits for its row of c. The batch now never waits for a
// conversation while it holds another: c's messages leave it and run on
// their own, holding nothing while they wait.
func TestIngestBatchHoldsNoConversationWhileItWaits(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	ctx := context.Background()
	for _, c := range []string{"a", "c", "d"} {
		e.mustIngest(msg(c, c+"-0"))
	}

	tx, appPID := e.appHoldsC(t, "20ms")

	msgs := []NewMessage{msg("a", "a-1"), msg("c", "c-1"), msg("c", "c-2"), msg("d", "d-1")}
	answers := e.offerInOneBatch(msgs)
	waitFor(t, "an ingest to wait for the application's conversation c", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, appPID) > 0
	})

	if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'a', 'app-a', 'inbound', '{}')`); err != nil {
		t.Fatalf("the application's enqueue to a, its import's second conversation: %v; want it stored (it may wait for a's batch to commit, never be cancelled)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the application's commit: %v", err)
	}
	res := answers()

	// Every call answered as unbatched: a and d accepted; c's after the
	// application's, or refused (503, Retry-After) if its row stayed held
	// past LockTimeout — and then none of c's later messages accepted.
	cRefused := false
	for i, r := range res {
		m := msgs[i]
		switch {
		case r.err == nil && !r.accepted.Duplicate && r.accepted.Seq > 0:
			if m.ConversationID == "c" && cRefused {
				t.Fatalf("%s accepted (seq %d) after an earlier message of its conversation was refused", m.MessageID, r.accepted.Seq)
			}
		case m.ConversationID == "c" && ErrorCode(r.err) == CodeUnavailable:
			cRefused = true
		default:
			t.Fatalf("%s: %+v, %v; want accepted", m.MessageID, r.accepted, r.err)
		}
	}

	// Stored once each, nothing refused stored, each conversation's seqs in
	// the order its messages were offered, without gaps.
	for i, r := range res {
		want := 1
		if r.err != nil {
			want = 0
		}
		var n int
		var seq int64
		if err := e.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM ordo.messages WHERE message_id = $1`, msgs[i].MessageID).Scan(&n, &seq); err != nil {
			t.Fatal(err)
		}
		if n != want || (want == 1 && seq != r.accepted.Seq) {
			t.Fatalf("%s answered %+v, %v; stored %d times (seq %d)", msgs[i].MessageID, r.accepted, r.err, n, seq)
		}
	}
	order := map[string][]string{
		"a": {"a-0", "a-1", "app-a"},
		"c": {"c-0", "app-c", "c-1", "c-2"},
		"d": {"d-0", "d-1"},
	}
	for conv, ids := range order {
		rows, err := e.pool.Query(ctx, `
SELECT m.message_id FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE c.conversation_id = $1 ORDER BY m.seq`, conv)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, id := range ids {
			if e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1`, id) == 1 {
				want = append(want, id)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("conversation %s holds %v, want %v", conv, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("conversation %s holds %v in seq order, want %v", conv, got, want)
			}
		}
	}
	if n := e.count(seqGapsQuery); n != 0 {
		t.Fatalf("%d conversations with gaps in their seqs", n)
	}
}

// An application holds conversation c past LockTimeout while a batch
// carries a, c and d's messages: a's and d's are accepted without waiting
// for it, c's are refused (503 with Retry-After, the contract's answer to
// a lock held past LockTimeout) and not stored, and the batch itself did
// not fail.
func TestIngestBatchLeavesAHeldConversationBehind(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	ctx := context.Background()
	for _, c := range []string{"a", "c", "d"} {
		e.mustIngest(msg(c, c+"-0"))
	}
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'c', 'app-c', 'inbound', '{}')`); err != nil {
		t.Fatal(err)
	}
	msgs := []NewMessage{msg("a", "a-1"), msg("c", "c-1"), msg("c", "c-2"), msg("d", "d-1")}
	res := e.offerInOneBatch(msgs)()
	for i, r := range res {
		stored := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = $1`, msgs[i].MessageID)
		if msgs[i].ConversationID == "c" {
			if ErrorCode(r.err) != CodeUnavailable || stored != 0 {
				t.Fatalf("%s, of the held conversation: %+v, %v, stored %d times; want refused (%s) and not stored", msgs[i].MessageID, r.accepted, r.err, stored, CodeUnavailable)
			}
			continue
		}
		if r.err != nil || r.accepted.Duplicate || stored != 1 {
			t.Fatalf("%s: %+v, %v, stored %d times; want accepted once", msgs[i].MessageID, r.accepted, r.err, stored)
		}
	}
	if n := e.eng.ingest.retried.Load(); n != 0 {
		t.Fatalf("%d batches failed and ran again one by one; want the held conversation to leave the batch instead", n)
	}
}

// offerInOneBatch offers msgs one after another (so each conversation's
// in this order) while the engine's only batch slot is busy (a batch
// waiting on holdConv), then lets that batch go: msgs gather in the next
// one. The returned func waits for and returns their answers, in msgs'
// order. Needs maxInFlight 1.
func (e *batchEnv) offerInOneBatch(msgs []NewMessage) func() []ingestResult {
	e.t.Helper()
	if e.eng.ingest.maxInFlight != 1 || len(msgs) > e.eng.ingest.maxBatch {
		e.t.Fatal("offerInOneBatch needs maxInFlight 1 and at most maxBatch messages")
	}
	release := e.holdConversation()
	defer release()
	holdDone := make(chan error, 1)
	go func() {
		_, err := e.eng.Ingest(context.Background(), msg(holdConv, fmt.Sprintf("hold-%d", e.eng.ingest.batches.Load())))
		holdDone <- err
	}()
	e.waitHoldingBatch()
	res := make([]ingestResult, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := e.eng.Ingest(context.Background(), m)
			res[i] = ingestResult{accepted: a, err: err}
		}()
		waitFor(e.t, "the call to wait for the batch slot", func() bool { _, p := e.eng.ingest.state(); return p == i+1 })
	}
	release()
	if err := <-holdDone; err != nil {
		e.t.Fatalf("holding message: %v", err)
	}
	return func() []ingestResult {
		wg.Wait()
		return res
	}
}

// The conversation that left a batch is committed in a transaction of its
// own; a bad message among its messages fails only itself there too.
func TestIngestHeldConversationsBadMessageFailsOnlyItself(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	ctx := context.Background()
	for _, c := range []string{"a", "c"} {
		e.mustIngest(msg(c, c+"-0"))
	}
	tx, appPID := e.appHoldsC(t, "")
	bad := msg("c", "c-bad")
	bad.Direction = "sideways"
	msgs := []NewMessage{msg("a", "a-1"), msg("c", "c-1"), bad, msg("c", "c-2")}
	answers := e.offerInOneBatch(msgs)
	waitFor(t, "c's messages to wait for the application's row", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, appPID) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := answers()
	if n := e.eng.ingest.left.Load(); n != 3 {
		t.Fatalf("%d messages left the batch, want c's 3", n)
	}
	var seqs []int64
	for i, r := range res {
		m := msgs[i]
		if m.MessageID == "c-bad" {
			if ErrorCode(r.err) != CodeInvalid || e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'c-bad'`) != 0 {
				t.Fatalf("c-bad: %+v, %v; want refused (%s) and not stored", r.accepted, r.err, CodeInvalid)
			}
			continue
		}
		// Refused (503) only if the application's row stayed held past
		// LockTimeout, and then c-2 with c-1.
		if ErrorCode(r.err) == CodeUnavailable && m.ConversationID == "c" && (m.MessageID == "c-1" || ErrorCode(res[1].err) == CodeUnavailable) {
			continue
		}
		if r.err != nil || r.accepted.Duplicate {
			t.Fatalf("%s: %+v, %v; want accepted", m.MessageID, r.accepted, r.err)
		}
		if m.ConversationID == "c" {
			seqs = append(seqs, r.accepted.Seq)
		}
	}
	// c-0 and app-c come first: c-1 and c-2 take 3 and 4.
	if len(seqs) == 2 && (seqs[0] != 3 || seqs[1] != 4) {
		t.Fatalf("c-1 and c-2 got seqs %v, want [3 4]", seqs)
	}
}

// appHoldsC is an application's own transaction, on a connection of its
// own, that has enqueued "app-c" in conversation c and so holds c's row
// until it ends; pid is its backend's. deadlockTimeout, if set, is its
// session's deadlock_timeout: short, Postgres checks for a cycle as soon
// as it waits.
func (e *batchEnv) appHoldsC(t *testing.T, deadlockTimeout string) (tx pgx.Tx, pid int) {
	t.Helper()
	ctx := context.Background()
	app, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	if err := app.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if deadlockTimeout != "" {
		if _, err := app.Exec(ctx, `SELECT set_config('deadlock_timeout', $1, false)`, deadlockTimeout); err != nil {
			t.Fatal(err)
		}
	}
	if tx, err = app.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT ordo.enqueue_message('acme', 'c', 'app-c', 'inbound', '{}')`); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}
