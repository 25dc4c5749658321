package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-dev/ordo/sql/sqltest"
	"github.com/ordo-dev/ordo/tenants"
)

// batchEnv is an Engine on a fresh database with tenant "acme".
type batchEnv struct {
	t    *testing.T
	url  string // the database's, for connections of a test's own
	pool *pgxpool.Pool
	eng  *Engine
}

// holdConv is the conversation forceOneBatch blocks on.
const holdConv = "hold"

// setupBatch builds a batchEnv; maxInFlight 0 keeps the default.
func setupBatch(t *testing.T, maxInFlight int) *batchEnv {
	t.Helper()
	ctx := context.Background()
	url := sqltest.URL(t)
	pool, err := pgxpool.New(ctx, url+"&pool_max_conns=12")
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	key, err := tenants.GenerateMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	vault, err := tenants.NewVault(pool, []tenants.MasterKey{key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.NewStore(pool, vault).Create(ctx, tenants.CreateParams{Slug: "acme"}); err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	e := &batchEnv{t: t, url: url, pool: pool, eng: New(pool, nil)}
	if maxInFlight > 0 {
		e.eng.ingest.maxInFlight = maxInFlight // before any call: no race
		// forceOneBatch holds a batch on a locked conversation on purpose.
		e.eng.ingest.lockTimeout = "60s"
	}
	// The conversation forceOneBatch locks must exist.
	e.mustIngest(msg(holdConv, "hold-0"))
	return e
}

func msg(conv, id string) NewMessage {
	return NewMessage{Tenant: "acme", ConversationID: conv, MessageID: id,
		Payload: []byte(`{"to":"16505551234","type":"text","text":{"body":"hi"}}`)}
}

func (e *batchEnv) mustIngest(m NewMessage) Accepted {
	e.t.Helper()
	a, err := e.eng.Ingest(context.Background(), m)
	if err != nil {
		e.t.Fatalf("ingest %q: %v", m.MessageID, err)
	}
	return a
}

func (e *batchEnv) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		e.t.Fatalf("count %q: %v", query, err)
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// holdConversation locks holdConv's row as an ingest would, so a batch
// touching it waits; the returned func lets it go.
func (e *batchEnv) holdConversation() (release func()) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ordo.conversations WHERE conversation_id = $1 FOR UPDATE`, holdConv); err != nil {
		e.t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// waitLockWaiters waits until n sessions of this database wait for a lock.
func (e *batchEnv) waitLockWaiters(n int) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%d sessions waiting for a lock", n), func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) >= n
	})
}

// waitHoldingBatch waits until the engine's one batch slot is taken by a
// batch waiting on holdConv's lock, and no call waits for a slot. The slot
// count alone is not enough: the batch that answered the previous call
// frees its slot only after answering, so a count of one running batch can
// still be that one (seen in CI under load: the next two calls then went
// in one batch).
func (e *batchEnv) waitHoldingBatch() {
	e.t.Helper()
	e.waitLockWaiters(1)
	waitFor(e.t, "the holding batch to run", func() bool { r, p := e.eng.ingest.state(); return r == 1 && p == 0 })
}

// forceOneBatch offers msgs concurrently while the engine's only batch slot
// is busy (a batch waiting on holdConv), so they all gather and then go in
// one batch; it returns their answers in msgs' order. Needs maxInFlight 1.
func (e *batchEnv) forceOneBatch(msgs []NewMessage) []ingestResult {
	e.t.Helper()
	if e.eng.ingest.maxInFlight != 1 || len(msgs) > e.eng.ingest.maxBatch {
		e.t.Fatal("forceOneBatch needs maxInFlight 1 and at most maxBatch messages")
	}
	before := e.eng.ingest.batches.Load()
	release := e.holdConversation()
	defer release()

	holdDone := make(chan error, 1)
	go func() {
		_, err := e.eng.Ingest(context.Background(), msg(holdConv, fmt.Sprintf("hold-%d", before)))
		holdDone <- err
	}()
	e.waitHoldingBatch()

	out := make([]ingestResult, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := e.eng.Ingest(context.Background(), m)
			out[i] = ingestResult{accepted: a, err: err}
		}()
	}
	waitFor(e.t, "every call to wait for the batch slot", func() bool { _, p := e.eng.ingest.state(); return p == len(msgs) })
	release()
	if err := <-holdDone; err != nil {
		e.t.Fatalf("holding message: %v", err)
	}
	wg.Wait()
	// The holding batch and one more: every offered message shared one.
	if n := e.eng.ingest.batches.Load() - before; n != 2 {
		e.t.Fatalf("%d calls ran in %d batches, want 2 (the holding one and one for all the others)", len(out)+1, n)
	}
	return out
}

// Many concurrent callers: every message stored once, each conversation's
// seqs 1..n without gaps, and a caller's sequential messages in its order.
func TestIngestConcurrentCallsAcceptEachMessageOnceInOrder(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 0)
	const callers, perCaller, convs = 40, 25, 10
	seqs := make([][]int64, callers)
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := fmt.Sprintf("conv-%d", g%convs)
			for i := range perCaller {
				a, err := e.eng.Ingest(context.Background(), msg(conv, fmt.Sprintf("m-%d-%d", g, i)))
				if err != nil {
					errs <- err
					return
				}
				if a.Duplicate || a.ConversationID != conv || a.Status != "queued" {
					errs <- fmt.Errorf("caller %d message %d: answer %+v", g, i, a)
					return
				}
				seqs[g] = append(seqs[g], a.Seq)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for g, s := range seqs {
		if !slices.IsSorted(s) || len(slices.Compact(slices.Clone(s))) != perCaller {
			t.Fatalf("caller %d sent in order but got seqs %v", g, s)
		}
	}
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'm-%'`); n != callers*perCaller {
		t.Fatalf("%d messages stored, want %d", n, callers*perCaller)
	}
	rows, err := e.pool.Query(context.Background(), `
SELECT c.conversation_id, c.last_seq, array_agg(m.seq ORDER BY m.seq)
FROM ordo.conversations c JOIN ordo.messages m ON m.conversation_pk = c.id
WHERE c.conversation_id LIKE 'conv-%' GROUP BY c.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var (
			conv string
			last int64
			got  []int64
		)
		if err := rows.Scan(&conv, &last, &got); err != nil {
			t.Fatal(err)
		}
		want := make([]int64, callers/convs*perCaller)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(got, want) || last != int64(len(want)) {
			t.Fatalf("conversation %s: last_seq %d, seqs %v; want 1..%d without gaps", conv, last, got, len(want))
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != convs {
		t.Fatalf("%d conversations, want %d", seen, convs)
	}
	// Batches lock conversations in one order: none deadlocked (nor failed).
	if n := e.eng.ingest.retried.Load(); n != 0 {
		t.Fatalf("%d batches failed and ran again one by one", n)
	}
	t.Logf("%d calls in %d batches, %d left a batch for a conversation held", callers*perCaller, e.eng.ingest.batches.Load()-1, e.eng.ingest.left.Load())
}

// copyElsewhere is a copy of message id offered in conversation conv as
// Meta's webhook offers it (on_reuse => duplicate): a copy in another
// conversation is then a duplicate of the original, not a reuse, and takes
// the paths of a racing copy.
func copyElsewhere(conv, id string) NewMessage {
	m := msg(conv, id)
	m.ReuseIsDuplicate = true
	return m
}

// Copies of one message_id in one batch, across conversations: one is
// accepted, every other copy gets the original's answer.
func TestIngestSameMessageIDInOneBatch(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	var msgs []NewMessage
	for i := range 20 {
		msgs = append(msgs, copyElsewhere([]string{"b", "a"}[i%2], "same"))
	}
	res := e.forceOneBatch(msgs)
	checkOneOriginal(t, res)
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'same'`); n != 1 {
		t.Fatalf("%d rows for message_id same, want 1", n)
	}
	var conv string
	var seq int64
	if err := e.pool.QueryRow(context.Background(), `
SELECT c.conversation_id, m.seq FROM ordo.messages m JOIN ordo.conversations c ON c.id = m.conversation_pk
WHERE m.message_id = 'same'`).Scan(&conv, &seq); err != nil {
		t.Fatal(err)
	}
	if res[0].accepted.ConversationID != conv || res[0].accepted.Seq != seq {
		t.Fatalf("answers name conversation %q seq %d, the stored message is in %q seq %d", res[0].accepted.ConversationID, res[0].accepted.Seq, conv, seq)
	}
	// A duplicate takes no seq: the original's conversation has exactly one.
	if n := e.count(`SELECT coalesce(sum(last_seq), 0)::int FROM ordo.conversations WHERE conversation_id IN ('a', 'b')`); n != 1 {
		t.Fatalf("conversations a and b handed out %d seqs, want 1", n)
	}
}

// Copies offered at once through two engines (two API servers), across
// batches: one accepted, the rest duplicates of it.
func TestIngestSameMessageIDAcrossBatches(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 0)
	engines := []*Engine{e.eng, New(e.pool, nil)}
	res := make([]ingestResult, 30)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a, err := engines[i%2].Ingest(context.Background(), msg("x", "same2"))
			res[i] = ingestResult{accepted: a, err: err}
		}()
	}
	close(start)
	wg.Wait()
	checkOneOriginal(t, res)
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'same2'`); n != 1 {
		t.Fatalf("%d rows for message_id same2, want 1", n)
	}
	if n := e.count(`SELECT last_seq::int FROM ordo.conversations WHERE conversation_id = 'x'`); n != 1 {
		t.Fatalf("conversation x handed out %d seqs, want 1", n)
	}
}

// A copy whose original another transaction committed while the copy's
// batch waited for a row lock: the batch's join cannot see that original,
// and the answer must still carry its conversation.
func TestIngestDuplicateOfOriginalCommittedWhileWaiting(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 0)
	release := e.holdConversation()
	defer release()
	copyDone := make(chan ingestResult, 1)
	go func() {
		a, err := e.eng.Ingest(context.Background(), copyElsewhere(holdConv, "late"))
		copyDone <- ingestResult{accepted: a, err: err}
	}()
	e.waitLockWaiters(1)
	orig := e.mustIngest(copyElsewhere("elsewhere", "late"))
	if orig.Duplicate {
		t.Fatalf("first commit of message late answered as a duplicate: %+v", orig)
	}
	release()
	r := <-copyDone
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := orig
	want.Duplicate = true
	if r.accepted != want {
		t.Fatalf("copy answered %+v, want the original's answer %+v", r.accepted, want)
	}
	if n := e.count(`SELECT last_seq::int FROM ordo.conversations WHERE conversation_id = $1`, holdConv); n != 1 {
		t.Fatalf("conversation %s handed out %d seqs, want 1 (the copy gives its seq back)", holdConv, n)
	}
}

// checkOneOriginal checks that exactly one answer accepted the message and
// every other is a duplicate with the original's id, seq and conversation.
func checkOneOriginal(t *testing.T, res []ingestResult) {
	t.Helper()
	var orig *Accepted
	for _, r := range res {
		if r.err != nil {
			t.Fatalf("ingest: %v", r.err)
		}
		if !r.accepted.Duplicate {
			if orig != nil {
				t.Fatalf("accepted twice: %+v and %+v", *orig, r.accepted)
			}
			orig = &r.accepted
		}
	}
	if orig == nil {
		t.Fatal("every copy answered as a duplicate: the message was never accepted")
	}
	for _, r := range res {
		a := r.accepted
		a.Duplicate = false
		if a != *orig {
			t.Fatalf("duplicate answered %+v, want the original's answer %+v", r.accepted, *orig)
		}
	}
}

// Bad messages in a batch of good ones: each bad one gets its own error and
// stores nothing; every good one is accepted.
func TestIngestBadMessageFailsOnlyItself(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	var msgs []NewMessage
	for i := range 10 {
		msgs = append(msgs, msg(fmt.Sprintf("c%d", i%5), fmt.Sprintf("good-%d", i)))
	}
	badConv := msg("bad\x01conv", "bad-conv")
	noTenant := msg("c0", "no-tenant")
	noTenant.Tenant = "nobody"
	nul := msg("c1", "nul\x00id")
	sideways := msg("c2", "sideways")
	sideways.Direction = "sideways"
	type badCase struct {
		m    NewMessage
		code Code
		text string
	}
	bad := []badCase{
		{badConv, CodeInvalid, "conversation_id: must be 1 to 256 printable characters, without control characters or line separators: U+0001 at character 4"},
		{noTenant, CodeNotFound, "tenant: not found"},
		{nul, CodeInvalid, "text must not contain NUL (\\u0000) characters"},
		{sideways, CodeInvalid, "direction: must be inbound or outbound"},
	}
	for i, b := range bad {
		msgs = slices.Insert(msgs, 2+3*i, b.m) // among the good ones
	}
	retriedBefore := e.eng.ingest.retried.Load()
	res := e.forceOneBatch(msgs)
	good := 0
	for i, r := range res {
		m := msgs[i]
		if k := slices.IndexFunc(bad, func(b badCase) bool { return b.m.MessageID == m.MessageID }); k >= 0 {
			if ErrorCode(r.err) != bad[k].code || ErrorMessage(r.err) != bad[k].text {
				t.Fatalf("%q: got %v (%+v), want %s %q", m.MessageID, r.err, r.accepted, bad[k].code, bad[k].text)
			}
			continue
		}
		if r.err != nil || r.accepted.Duplicate || r.accepted.MessageID != m.MessageID || r.accepted.Seq < 1 {
			t.Fatalf("%q: got %+v, %v; want accepted", m.MessageID, r.accepted, r.err)
		}
		good++
	}
	if good != 10 {
		t.Fatalf("%d good messages answered, want 10", good)
	}
	if n := e.eng.ingest.retried.Load() - retriedBefore; n != 1 {
		t.Fatalf("%d batches run again one by one, want 1", n)
	}
	// Stored: the 10 good ones and the two holding ones, nothing else.
	if n := e.count(`SELECT count(*) FROM ordo.messages`); n != 12 {
		t.Fatalf("%d messages stored, want 12", n)
	}
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id IN ('bad-conv', 'no-tenant', 'sideways') OR message_id LIKE 'nul%'`); n != 0 {
		t.Fatalf("%d rejected messages stored", n)
	}
	if n := e.count(`SELECT count(*) FROM ordo.conversations WHERE conversation_id LIKE 'bad%'`); n != 0 {
		t.Fatalf("a rejected message left %d conversations", n)
	}
	// No seq was lost to the rolled-back batch: every conversation 1..n.
	if n := e.count(seqGapsQuery); n != 0 {
		t.Fatalf("%d conversations with gaps in their seqs", n)
	}
}

// Callers that gather while a batch runs share the next one: fewer batches
// than calls, every message committed when its caller is answered.
func TestIngestGroupsConcurrentCalls(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	var msgs []NewMessage
	for i := range 50 {
		msgs = append(msgs, msg(fmt.Sprintf("g%d", i%7), fmt.Sprintf("grouped-%d", i)))
	}
	// forceOneBatch fails the test unless the 51 calls ran in 2 batches.
	res := e.forceOneBatch(msgs)
	for i, r := range res {
		if r.err != nil || r.accepted.Duplicate {
			t.Fatalf("%s: %+v, %v", msgs[i].MessageID, r.accepted, r.err)
		}
		var seq int64
		if err := e.pool.QueryRow(context.Background(), `SELECT seq FROM ordo.messages WHERE message_id = $1`, msgs[i].MessageID).Scan(&seq); err != nil || seq != r.accepted.Seq {
			t.Fatalf("%s answered seq %d; stored: %d, %v", msgs[i].MessageID, r.accepted.Seq, seq, err)
		}
	}
	if n := e.eng.ingest.retried.Load(); n != 0 {
		t.Fatalf("%d batches failed", n)
	}
}

// A caller that leaves before its batch is sent is answered with its
// context's end at once, and its message is not stored.
func TestIngestCallerLeavingBeforeSendStoresNothing(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	release := e.holdConversation()
	defer release()
	holdDone := make(chan error, 1)
	go func() {
		_, err := e.eng.Ingest(context.Background(), msg(holdConv, "hold-1"))
		holdDone <- err
	}()
	e.waitHoldingBatch()

	ctx, cancel := context.WithCancel(context.Background())
	leftDone := make(chan error, 1)
	go func() {
		_, err := e.eng.Ingest(ctx, msg("c", "left"))
		leftDone <- err
	}()
	waitFor(t, "the call to wait", func() bool { _, p := e.eng.ingest.state(); return p == 1 })
	cancel()
	if err := <-leftDone; ErrorCode(err) != CodeUnavailable || !errors.Is(err, context.Canceled) {
		t.Fatalf("left caller got %v, want unavailable (cancelled)", err)
	}
	release()
	if err := <-holdDone; err != nil {
		t.Fatal(err)
	}
	// The next call runs once the dropped one was taken and skipped.
	e.mustIngest(msg("c", "after"))
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id = 'left'`); n != 0 {
		t.Fatal("a message whose caller left before its batch was sent was stored")
	}
}

// An application's long transaction holds one conversation of tenant acme.
// Every other tenant's messages (and acme's other conversations) are still
// accepted within a client's deadline, and the blocked conversation's own
// messages get a clear 503-class answer after LockTimeout, not a hang.
// (Before: the batches waited on the lock with no bound, the four batch
// slots filled, and every tenant's ingest timed out.)
func TestLockedConversationDelaysNoOtherIngest(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 0)
	ctx := context.Background()
	key, _ := tenants.GenerateMasterKey()
	vault, err := tenants.NewVault(e.pool, []tenants.MasterKey{key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenants.NewStore(e.pool, vault).Create(ctx, tenants.CreateParams{Slug: "quiet"}); err != nil {
		t.Fatal(err)
	}
	release := e.holdConversation()
	defer release()

	const blocked, others = 12, 40
	var wg sync.WaitGroup
	blockedErrs := make([]error, blocked)
	for i := range blocked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, blockedErrs[i] = e.eng.Ingest(ctx, msg(holdConv, fmt.Sprintf("blocked-%d", i)))
		}()
	}
	e.waitLockWaiters(1)
	otherErrs := make([]error, others)
	for i := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := msg(fmt.Sprintf("other-%d", i%7), fmt.Sprintf("other-%d", i))
			if i%2 == 0 {
				m.Tenant = "quiet"
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second) // the client's deadline
			defer cancel()
			_, otherErrs[i] = e.eng.Ingest(cctx, m)
		}()
	}
	wg.Wait()
	for i, err := range otherErrs {
		if err != nil {
			t.Fatalf("message other-%d of an unlocked conversation: %v; want accepted within the client's deadline", i, err)
		}
	}
	for i, err := range blockedErrs {
		if ErrorCode(err) != CodeUnavailable {
			t.Fatalf("message blocked-%d on the locked conversation: %v; want %s", i, err, CodeUnavailable)
		}
	}
	if n := e.count(`SELECT count(*) FROM ordo.messages WHERE message_id LIKE 'blocked-%'`); n != 0 {
		t.Fatalf("%d refused messages stored", n)
	}
}

// The same copies offered through the REST path (on_reuse => error): the
// copies in the original's conversation are duplicates, those in the other
// conversation are refused as reused ids, and nothing of theirs is stored.
func TestIngestReusedMessageIDInOneBatch(t *testing.T) {
	t.Parallel()
	e := setupBatch(t, 1)
	var msgs []NewMessage
	for i := range 20 {
		msgs = append(msgs, msg([]string{"b", "a"}[i%2], "same"))
	}
	res := e.forceOneBatch(msgs)
	var originals, dups, reused int
	var origConv string
	for _, r := range res {
		switch {
		case r.err != nil && ErrorCode(r.err) == CodeReused:
			reused++
		case r.err != nil:
			t.Fatalf("unexpected error: %v", r.err)
		case r.accepted.Duplicate:
			dups++
		default:
			originals++
			origConv = r.accepted.ConversationID
		}
	}
	if originals != 1 || dups != 9 || reused != 10 {
		t.Fatalf("%d originals, %d duplicates, %d reused; want 1, 9, 10", originals, dups, reused)
	}
	for i, r := range res {
		if r.err == nil && msgs[i].ConversationID != origConv {
			t.Errorf("a copy in conversation %s answered %+v, want refused", msgs[i].ConversationID, r.accepted)
		}
	}
	if n := e.count(`SELECT coalesce(sum(last_seq), 0)::int FROM ordo.conversations WHERE conversation_id IN ('a', 'b')`); n != 1 {
		t.Fatalf("%d seqs handed out, want 1", n)
	}
}

// The conversations found locked are forgotten once their time is over,
// even when none of their messages comes again: an API process up for
// weeks must not keep every conversation an import ever held (the map
// only lost an entry when that conversation was asked about again).
func TestLockedConversationsAreForgotten(t *testing.T) {
	t.Parallel()
	b := newBatcher()
	for i := range 1000 {
		b.markLocked(convKey{"acme", fmt.Sprint(i)})
	}
	for k := range b.locked {
		b.locked[k] = time.Now().Add(-time.Millisecond) // their time is over
	}
	b.markLocked(convKey{"acme", "now"})
	if n := len(b.locked); n != 1 {
		t.Fatalf("%d conversations remembered as locked; want only the one just found locked", n)
	}
	if !b.isLocked(convKey{"acme", "now"}) {
		t.Fatal("the conversation just found locked is not remembered")
	}
}

// A batch never takes a conversation a running batch (or a conversation's
// own transaction after it left one) holds: those calls wait for the next
// batch, in their order, while other conversations' calls go at once.
// Two batches of one conversation at once would find its row taken and
// send the second one's messages off on their own.
func TestBatchesTakeNoConversationInFlight(t *testing.T) {
	t.Parallel()
	b := newBatcher()
	b.maxInFlight = 2
	call := func(conv, id string) *ingestCall { return &ingestCall{msg: msg(conv, id)} }
	ids := func(batch []*ingestCall) (out []string) {
		for _, c := range batch {
			out = append(out, c.msg.MessageID)
		}
		return out
	}
	first := b.add(call("x", "x1"))
	if got := ids(first); !slices.Equal(got, []string{"x1"}) {
		t.Fatalf("first batch %v, want [x1]", got)
	}
	if got := b.add(call("x", "x2")); got != nil {
		t.Fatalf("a second batch took %v while x1's batch runs; want x2 to wait", ids(got))
	}
	if got := ids(b.add(call("y", "y1"))); !slices.Equal(got, []string{"y1"}) {
		t.Fatalf("second batch %v, want [y1]: y is in no running batch", got)
	}
	b.add(call("x", "x3"))
	b.keep(first) // x1 left its batch for a transaction of its own
	if got := b.finish(first); got != nil {
		t.Fatalf("x1's batch ended but x1 still runs on its own; the next batch took %v", ids(got))
	}
	if got := ids(b.release(first)); !slices.Equal(got, []string{"x2", "x3"}) {
		t.Fatalf("once x1 is done, the next batch is %v, want [x2 x3]", got)
	}
}

// seqGapsQuery counts conversations whose messages are not exactly seqs
// 1..last_seq: a seq lost to a rolled-back batch, or a message stored twice.
const seqGapsQuery = `
SELECT count(*) FROM ordo.conversations c
WHERE c.last_seq <> (SELECT count(*) FROM ordo.messages m WHERE m.conversation_pk = c.id)
   OR c.last_seq <> (SELECT coalesce(max(m.seq), 0) FROM ordo.messages m WHERE m.conversation_pk = c.id)`
